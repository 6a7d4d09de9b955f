package ptxgen

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/remoting/backend/emulated/ptx"
)

// Finding is one instruction that the emulator computes differently from
// the device when given the device's own operand values: the root of a
// mismatch, as opposed to the outputs that merely inherit it.
type Finding struct {
	Seed     uint64
	Thread   int
	Instr    string
	Operands []uint64
	Dev, Emu uint64
}

func (f Finding) String() string {
	ops := make([]string, len(f.Operands))
	for i, o := range f.Operands {
		ops[i] = fmt.Sprintf("%#x", o)
	}
	return fmt.Sprintf("seed %d thread %d `%s` operands [%s]: device %#x, emulator %#x",
		f.Seed, f.Thread, f.Instr, strings.Join(ops, " "), f.Dev, f.Emu)
}

// Explain re-executes, one at a time on the emulator, the instructions
// whose results differ between emu and dev (exact-output buffers of p),
// with the operand values the device computed. Only instructions whose
// operands and result are registers written once can be replayed so.
func Explain(p *Program, emu, dev []byte) []Finding {
	slotOf := map[string]int{}
	for i, s := range p.Slots {
		slotOf[s.Reg] = i
	}
	var out []Finding
	seen := map[string]int{}
	for _, d := range DiffSlots(p, emu, dev) {
		if d.SlotIndex < 0 {
			continue
		}
		rg := p.regs[d.Slot.Reg]
		// The result must come from the register's one definition: a
		// fresh register written once, not an input overwritten.
		if rg == nil || rg.writes != 1 || rg.view.part != "" || seen[rg.last] >= 3 || strings.Contains(rg.last, ".cc") || strings.Contains(rg.last, "c.") {
			continue
		}
		op, args, ok := splitInstr(rg.last)
		if !ok || args[0] != rg.name {
			continue
		}
		var vals []uint64
		for _, a := range args[1:] {
			if !strings.HasPrefix(a, "%") {
				continue
			}
			v, ok := p.regValue(a, d.Thread, dev, slotOf)
			if !ok {
				vals = nil
				break
			}
			vals = append(vals, v)
		}
		if vals == nil && len(args) > 1 && hasReg(args[1:]) {
			continue
		}
		got, err := runOne(op, args, vals)
		if err != nil || got == d.Dev {
			continue
		}
		seen[rg.last]++
		out = append(out, Finding{Seed: p.Seed, Thread: d.Thread, Instr: rg.last, Operands: vals, Dev: d.Dev, Emu: got})
	}
	return out
}

func hasReg(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "%") {
			return true
		}
	}
	return false
}

// splitInstr splits a plain instruction (no guard, vector, pair or memory
// operand) into its opcode and operands.
func splitInstr(text string) (string, []string, bool) {
	if strings.ContainsAny(text, "@{[|") {
		return "", nil, false
	}
	op, rest, ok := strings.Cut(strings.TrimSpace(text), " ")
	if !ok {
		return "", nil, false
	}
	args := strings.Split(rest, ", ")
	return op, args, len(args) > 0
}

// regValue is register name's value in thread t as the device left it.
func (p *Program) regValue(name string, t int, dev []byte, slotOf map[string]int) (uint64, bool) {
	rg := p.regs[name]
	// An operand holds at its use the value it ends with only if it was
	// written once, by its definition (or never: an input).
	if rg == nil || rg.writes > 1 || rg.view.part != "" && rg.writes != 0 {
		return 0, false
	}
	if i, ok := slotOf[name]; ok {
		return p.slotValue(dev, t, i), true
	}
	if rg.writes != 0 {
		return 0, false
	}
	w := binary.LittleEndian.Uint64(p.In[t*inStride+8*rg.view.word:])
	lo, hi := w&0xffffffff, w>>32
	switch rg.view.part {
	case "d":
		return w, true
	case "lo":
		return lo, true
	case "hi":
		return hi, true
	case "h0":
		return lo & 0xffff, true
	case "h1":
		return lo >> 16, true
	case "p":
		if int32(lo) < int32(hi) {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func regClass(name string) (class, bool) {
	for _, c := range []class{cFD, cF, cD, cR, cH, cP} {
		pre := classPrefix[c]
		if strings.HasPrefix(name, pre) && len(name) > len(pre) && name[len(pre)] >= '0' && name[len(pre)] <= '9' {
			return c, true
		}
	}
	return 0, false
}

// runOne runs one instruction on the emulator in a one-thread kernel with
// its register operands set to vals, and returns its result.
func runOne(op string, args []string, vals []uint64) (uint64, error) {
	var decl, body strings.Builder
	// The registers are declared as a generated kernel declares them, by
	// class and then by number: the emulator, like ptxas, orders some
	// operands by register (floatPeephole in the ptx package).
	var regs []string
	for _, a := range args {
		if strings.HasPrefix(a, "%") && !slices.Contains(regs, a) {
			regs = append(regs, a)
		}
	}
	key := func(r string) (class, int) {
		c, _ := regClass(r)
		n, _ := strconv.Atoi(r[len(classPrefix[c]):])
		return c, n
	}
	sort.Slice(regs, func(i, j int) bool {
		ci, ni := key(regs[i])
		cj, nj := key(regs[j])
		return ci < cj || ci == cj && ni < nj
	})
	for _, r := range regs {
		c, ok := regClass(r)
		if !ok {
			return 0, fmt.Errorf("not a generated register: %s", r)
		}
		fmt.Fprintf(&decl, "\t.reg %s %s;\n", classDecl[c], r)
	}
	dc, ok := regClass(args[0])
	if !ok {
		return 0, fmt.Errorf("not a generated register: %s", args[0])
	}
	i := 0
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "%") {
			continue
		}
		c, _ := regClass(a)
		if c == cP {
			fmt.Fprintf(&body, "\tld.global.u8 %%xh, [%%xa0+%d];\n\tsetp.ne.b16 %s, %%xh, 0;\n", 8*i, a)
		} else {
			fmt.Fprintf(&body, "\tld.global.b%d %s, [%%xa0+%d];\n", 8*classBytes[c], a, 8*i)
		}
		i++
	}
	fmt.Fprintf(&body, "\t%s %s;\n", op, strings.Join(args, ", "))
	if dc == cP {
		fmt.Fprintf(&body, "\tselp.u16 %%xh, 1, 0, %s;\n\tst.global.u8 [%%xa1], %%xh;\n", args[0])
	} else {
		fmt.Fprintf(&body, "\tst.global.b%d [%%xa1], %s;\n", 8*classBytes[dc], args[0])
	}
	src := fmt.Sprintf(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry x(.param .u64 pin, .param .u64 pout)\n{\n\t.reg .b64 %%xa<2>;\n\t.reg .b16 %%xh;\n%s\tld.param.u64 %%xa0, [pin];\n\tld.param.u64 %%xa1, [pout];\n%s\tret;\n}\n", decl.String(), body.String())
	mod, err := ptx.Load([]byte(src))
	if err != nil {
		return 0, err
	}
	fn, err := mod.Function("x")
	if err != nil {
		return 0, err
	}
	m := &emuMem{}
	in := make([]byte, 8*max(len(vals), 1))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(in[8*i:], v)
	}
	res := make([]byte, 8)
	params := make([]byte, 16)
	binary.LittleEndian.PutUint64(params, m.alloc(in))
	binary.LittleEndian.PutUint64(params[8:], m.alloc(res))
	if err := fn.Run(context.Background(), ptx.Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: params}, m, 1); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(res)
	if n := classBytes[dc]; n < 8 {
		v &= 1<<(8*n) - 1
	}
	return v, nil
}
