package ptx

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Device-side printf. nvcc compiles printf(fmt, ...) to a call of
// vprintf(fmt, args), where args points at the arguments packed in local
// memory, each aligned to its size: 4-byte integers and chars, 8-byte
// longs, doubles (floats are promoted) and pointers.

// printfBuiltin formats each calling thread's output, in lane order, to
// the launch's Output and returns the number of arguments it consumed.
func printfBuiltin(w *warp, fr *frame, in *inst, em uint32) {
	ci := in.call
	ps := uint32(fr.fn.paramSize)
	arg := func(l uint32, i int) uint64 {
		if i >= len(ci.args) {
			return 0
		}
		a := ci.args[i]
		return loadVal(fr.params[l*ps+a.Offset:l*ps+a.Offset+min(a.Size, 8)], tU64, ^uint64(0))
	}
	out := w.b.l.out
	for x := em; x != 0; x &= x - 1 {
		l := uint32(bits.TrailingZeros32(x))
		n := 0
		if out != nil {
			var s string
			s, n = w.formatPrintf(int(l), w.cstringN(int(l), arg(l, 0), 4096), arg(l, 1))
			w.b.l.outMu.Lock()
			_, _ = out.Write([]byte(s))
			w.b.l.outMu.Unlock()
		}
		if len(ci.rets) > 0 {
			r := ci.rets[0]
			storeVal(fr.params[l*ps+r.Offset:l*ps+r.Offset+min(r.Size, 4)], uint64(n))
		}
	}
}

// formatPrintf expands a C format with the arguments at the generic
// address args. A bad argument pointer ends the output with a note rather
// than failing the kernel, as printf must not change a program's result.
func (w *warp) formatPrintf(lane int, format string, args uint64) (s string, n int) {
	var sb strings.Builder
	defer func() {
		if recover() != nil {
			sb.WriteString("<printf argument outside memory>")
			s = sb.String()
		}
	}()
	var off uint64
	next := func(size uint64) uint64 {
		off = (off + size - 1) &^ (size - 1)
		b := w.generic(lane, args+off, size, nil)
		off += size
		n++
		return loadVal(b, tU64, ^uint64(0))
	}
	for i := 0; i < len(format) && sb.Len() <= maxPrintfLine; i++ {
		c := format[i]
		if c != '%' {
			sb.WriteByte(c)
			continue
		}
		start := i
		j := i + 1
		for j < len(format) && strings.IndexByte("-+ #0", format[j]) >= 0 {
			j++
		}
		flags := format[i+1 : j]
		num := func() string {
			k := j
			for j < len(format) && format[j] >= '0' && format[j] <= '9' {
				j++
			}
			if j == k {
				return ""
			}
			// Bound widths and precisions: a kernel must not make the
			// worker build huge strings.
			v, _ := strconv.Atoi(format[k:min(j, k+6)])
			return strconv.Itoa(min(v, maxPrintfField))
		}
		spec := flags + num()
		if j < len(format) && format[j] == '.' {
			j++
			spec += "." + num()
		}
		long := false
		half := 0
		for j < len(format) && strings.IndexByte("hlLzjt", format[j]) >= 0 {
			switch format[j] {
			case 'l', 'L', 'z', 'j', 't':
				long = true
			case 'h':
				half++
			}
			j++
		}
		if j >= len(format) {
			sb.WriteString(format[i:])
			break
		}
		verb := format[j]
		i = j
		intArg := func() uint64 {
			if long {
				return next(8)
			}
			v := next(4) & 0xffffffff
			switch half {
			case 1:
				v &= 0xffff
			case 2:
				v &= 0xff
			}
			return v
		}
		width := uint(32)
		if long {
			width = 64
		} else if half == 1 {
			width = 16
		} else if half == 2 {
			width = 8
		}
		switch verb {
		case '%':
			sb.WriteByte('%')
		case 'd', 'i':
			fmt.Fprintf(&sb, "%"+spec+"d", int64(sext(intArg(), width)))
		case 'u':
			fmt.Fprintf(&sb, "%"+spec+"d", intArg())
		case 'x', 'X', 'o':
			fmt.Fprintf(&sb, "%"+spec+string(verb), intArg())
		case 'c':
			fmt.Fprintf(&sb, "%"+spec+"c", rune(byte(next(4))))
		case 'f', 'F', 'e', 'E', 'g', 'G':
			if verb == 'F' {
				verb = 'f'
			}
			fmt.Fprintf(&sb, "%"+spec+string(verb), math.Float64frombits(next(8)))
		case 'a', 'A':
			v := 'x'
			if verb == 'A' {
				v = 'X'
			}
			fmt.Fprintf(&sb, "%"+spec+string(v), math.Float64frombits(next(8)))
		case 's':
			fmt.Fprintf(&sb, "%"+spec+"s", w.cstringN(lane, next(8), 4096))
		case 'p':
			fmt.Fprintf(&sb, "0x%x", next(8))
		default:
			sb.WriteString(format[start : j+1])
		}
	}
	if sb.Len() > maxPrintfLine {
		return sb.String()[:maxPrintfLine] + "<truncated>\n", n
	}
	return sb.String(), n
}

// Limits on one printf call's output.
const (
	maxPrintfField = 512
	maxPrintfLine  = 64 << 10
)
