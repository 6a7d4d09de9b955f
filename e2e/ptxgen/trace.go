package ptxgen

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Trace is a program instrumented to record, in every thread and in
// order, each value an instruction of the kernel writes (addresses
// aside, which differ between devices): after every
// instruction with a register result it stores that result to the
// thread's region of a fifth kernel parameter, the trace buffer. The
// device and the emulator run the same instrumented kernel, so the first
// entry in which their traces differ is the first instruction they
// compute differently, with every operand it read still equal.
//
// A thread's region is Stride bytes: the number of entries written
// (uint64), then 8 bytes per entry, the value zero-extended (a predicate
// as 0 or 1). An instruction with several results (a vector load, a
// setp with two predicates) makes one entry per result. Values whose
// order across threads is not defined (the old value of an atomic on a
// shared accumulator) and approximate results are not recorded. The
// region holds the most entries any path through the kernel can write
// (loops count at their most trips), so it never overflows.
type Trace struct {
	Program *Program
	// PTX is the instrumented kernel: .entry k(pin, pout, paout,
	// pscalar, ptrace).
	PTX string
	// idPTX is the same kernel storing, in place of each value, which
	// point and result it is (point<<3 | result), for labelling the
	// emulator's entries: the two kernels take the same paths, since
	// what they store is never read.
	idPTX  string
	Stride int
	Points []TracePoint
}

// TracePoint is one traced instruction.
type TracePoint struct {
	Line  int      // its line in the kernel's body
	Text  string   // as written, without the semicolon
	Dests []string // the registers it writes, one entry each
}

// Len is the size of the trace buffer.
func (t *Trace) Len() int { return t.Program.Threads() * t.Stride }

// The instrumentation's registers: the thread's region and the cursor
// (64-bit), and scratch.
const traceDecls = "\t.reg .b64 %trb, %trc, %trd;\n\t.reg .b32 %trv, %trw, %trx;\n"

// Trace instruments p.
func (p *Program) Trace() *Trace {
	t := &Trace{Program: p}
	var vb, ib strings.Builder
	capacity := 0
	for i, line := range p.body {
		text := strings.TrimSuffix(strings.TrimSpace(line), ";")
		if text == "ret" {
			// The count of entries, in the region's first word.
			for _, b := range []*strings.Builder{&vb, &ib} {
				b.WriteString("\tsub.s64 %trd, %trc, %trb;\n\tshr.u64 %trd, %trd, 3;\n\tsub.s64 %trd, %trd, 1;\n\tst.global.u64 [%trb], %trd;\n")
			}
		}
		vb.WriteString(line)
		ib.WriteString(line)
		if p.lines[i].noTrace {
			continue
		}
		dests := destRegs(text)
		if len(dests) == 0 || slices.ContainsFunc(dests, func(d string) bool { return p.addrs[d] }) {
			continue
		}
		id := len(t.Points)
		t.Points = append(t.Points, TracePoint{Line: i, Text: text, Dests: dests})
		capacity += len(dests) * p.lines[i].mult
		for j, d := range dests {
			c, ok := regClass(d)
			if !ok {
				panic(fmt.Sprintf("ptxgen: trace of %q: %q is not a generated register", text, d))
			}
			off := 8 * j
			switch c {
			case cP:
				fmt.Fprintf(&vb, "\tselp.u32 %%trv, 1, 0, %s;\n\tst.global.u32 [%%trc+%d], %%trv;\n", d, off)
			default:
				fmt.Fprintf(&vb, "\tst.global.b%d [%%trc+%d], %s;\n", 8*classBytes[c], off, d)
			}
			fmt.Fprintf(&ib, "\tmov.u32 %%trv, %d;\n\tst.global.u32 [%%trc+%d], %%trv;\n", id<<3|j, off)
		}
		for _, b := range []*strings.Builder{&vb, &ib} {
			fmt.Fprintf(b, "\tadd.s64 %%trc, %%trc, %d;\n", 8*len(dests))
		}
	}
	t.Stride = 8 + 8*capacity
	// The thread's region: ptrace + gtid*Stride; entries after the count.
	setup := fmt.Sprintf("\tld.param.u64 %%trb, [ptrace];\n\tcvta.to.global.u64 %%trb, %%trb;\n"+
		"\tmov.u32 %%trv, %%ctaid.x;\n\tmov.u32 %%trw, %%ntid.x;\n\tmov.u32 %%trx, %%tid.x;\n"+
		"\tmad.lo.s32 %%trv, %%trv, %%trw, %%trx;\n\tmul.wide.u32 %%trd, %%trv, %d;\n"+
		"\tadd.s64 %%trb, %%trb, %%trd;\n\tadd.s64 %%trc, %%trb, 8;\n", t.Stride)
	head := p.head + ".visible .entry k(" + entryParams + ", .param .u64 ptrace)\n{\n" + p.decls + traceDecls + setup
	t.PTX = head + vb.String() + "}\n"
	t.idPTX = head + ib.String() + "}\n"
	return t
}

// destRegs lists the registers an instruction line writes: its first
// operand when that is a register, a vector {a, b} or a pair a|b. Stores,
// reductions, branches, barriers without a result, calls and
// declarations write none.
func destRegs(text string) []string {
	t := strings.TrimSpace(text)
	if t == "" || strings.HasSuffix(t, ":") || strings.ContainsAny(t[:1], ".{}/") {
		return nil
	}
	if t[0] == '@' {
		_, rest, ok := strings.Cut(t, " ")
		if !ok {
			return nil
		}
		t = strings.TrimSpace(rest)
	}
	op, rest, ok := strings.Cut(t, " ")
	if !ok {
		return nil
	}
	base, _, _ := strings.Cut(op, ".")
	switch base {
	case "st", "red", "bra", "ret", "call", "exit", "membar", "fence", "trap":
		return nil
	case "bar", "barrier":
		if !strings.Contains(op, ".red") {
			return nil
		}
	}
	first := firstOperand(rest)
	switch {
	case strings.HasPrefix(first, "{"):
		var ds []string
		for _, d := range strings.Split(strings.Trim(first, "{}"), ",") {
			ds = append(ds, strings.TrimSpace(d))
		}
		return ds
	case strings.Contains(first, "|"):
		a, b, _ := strings.Cut(first, "|")
		return []string{strings.TrimSpace(a), strings.TrimSpace(b)}
	case strings.HasPrefix(first, "%"):
		return []string{first}
	}
	return nil
}

// firstOperand is the text up to the first comma outside braces and
// brackets.
func firstOperand(s string) string {
	depth := 0
	for i, r := range s {
		switch r {
		case '{', '[', '(':
			depth++
		case '}', ']', ')':
			depth--
		case ',':
			if depth == 0 {
				return strings.TrimSpace(s[:i])
			}
		}
	}
	return strings.TrimSpace(s)
}

// ThreadTrace is one thread's trace as a device wrote it: how many
// entries, their digest, and the entries themselves where they were kept.
type ThreadTrace struct {
	Count   int
	Digest  [8]byte
	Entries []uint64 // nil where not kept
	Out     []byte   // the thread's exact-output slots, where kept
}

// DeviceTrace is a device's run of one instrumented kernel, reduced to
// what comparing it with the emulator needs: every thread's count and
// digest, and in full the traces of the threads that differed from the
// emulator when it was recorded.
type DeviceTrace struct {
	Seed    uint64
	Version int
	// Err is the device's error, when the kernel did not compile or its
	// launch failed (for a compile error, the start of the log too).
	Err string
	// OutDigest is the digest of the instrumented kernel's exact
	// outputs, which should equal the plain kernel's (the corpus).
	OutDigest string
	Acc       []byte // the global accumulators (the first accBytes of out)
	Threads   []ThreadTrace
}

func traceDigest(es []uint64) [8]byte {
	b := make([]byte, 8*len(es))
	for i, e := range es {
		binary.LittleEndian.PutUint64(b[8*i:], e)
	}
	s := sha256.Sum256(b)
	var d [8]byte
	copy(d[:], s[:8])
	return d
}

// splitTrace cuts a trace buffer (Stride bytes per thread) into threads.
func (t *Trace) splitTrace(buf []byte) ([][]uint64, error) {
	n := t.Program.Threads()
	if len(buf) < n*t.Stride {
		return nil, fmt.Errorf("trace buffer of %d bytes, want %d", len(buf), n*t.Stride)
	}
	out := make([][]uint64, n)
	for th := range n {
		r := buf[th*t.Stride : (th+1)*t.Stride]
		cnt := binary.LittleEndian.Uint64(r)
		if cnt > uint64(t.Stride/8-1) {
			return nil, fmt.Errorf("thread %d wrote %d trace entries, more than the %d its region holds", th, cnt, t.Stride/8-1)
		}
		es := make([]uint64, cnt)
		for i := range es {
			es[i] = binary.LittleEndian.Uint64(r[8+8*i:])
		}
		out[th] = es
	}
	return out, nil
}

// RunTrace runs the instrumented kernel on the emulator and returns the
// exact outputs and every thread's trace.
func (t *Trace) RunTrace(ctx context.Context) (out []byte, threads [][]uint64, err error) {
	return t.run(ctx, t.PTX)
}

// runIDs runs the labelling kernel: every entry is point<<3 | result.
func (t *Trace) runIDs(ctx context.Context) ([][]uint64, error) {
	_, ids, err := t.run(ctx, t.idPTX)
	return ids, err
}

func (t *Trace) run(ctx context.Context, src string) ([]byte, [][]uint64, error) {
	buf := make([]byte, t.Len())
	out, _, err := runKernel(ctx, t.Program, src, buf, 1)
	if err != nil {
		return nil, nil, err
	}
	threads, err := t.splitTrace(buf)
	return out, threads, err
}

// ParseTraceRecord reads what gpurun records for an instrumented kernel
// (status 0): the exact outputs, the approximate outputs, then per thread
// a uint32 count and that many 8-byte entries.
func (t *Trace) ParseTraceRecord(data []byte) (out []byte, threads [][]uint64, err error) {
	p := t.Program
	if len(data) < p.OutLen()+p.ApproxLen {
		return nil, nil, fmt.Errorf("seed %d: trace record of %d bytes, shorter than the outputs", p.Seed, len(data))
	}
	out = data[:p.OutLen()]
	r := data[p.OutLen()+p.ApproxLen:]
	for th := 0; th < p.Threads(); th++ {
		if len(r) < 4 {
			return nil, nil, fmt.Errorf("seed %d: trace record ends at thread %d", p.Seed, th)
		}
		n := int(binary.LittleEndian.Uint32(r))
		r = r[4:]
		if n > t.Stride/8-1 || len(r) < 8*n {
			return nil, nil, fmt.Errorf("seed %d: thread %d: %d trace entries, the record holds %d and the region %d", p.Seed, th, n, len(r)/8, t.Stride/8-1)
		}
		es := make([]uint64, n)
		for i := range es {
			es[i] = binary.LittleEndian.Uint64(r[8*i:])
		}
		threads = append(threads, es)
		r = r[8*n:]
	}
	if len(r) != 0 {
		return nil, nil, fmt.Errorf("seed %d: trace record has %d bytes too many", p.Seed, len(r))
	}
	return out, threads, nil
}

// firstDiff is the index of the first entry in which a and b differ, or
// -1 when they are equal (a shorter trace differs where it ends).
func firstDiff(a, b []uint64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
