package ptxgen

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Version numbers the generator's output: a seed names the same program
// only under the same version. A corpus records the version it was made
// with, and is replayed with programs of that version.
//
// Version 2 never guards an instruction of a carry chain: a guarded
// add.cc that a lane skips leaves the condition code the next addc reads
// undefined, and version 1 generated such chains.
//
// Version 3 makes every double NaN of a kernel's inputs and immediates the
// default NaN (defaultNaN64, what invalid operations produce too): of two
// different NaN operands, which one a double operation returns follows
// ptxas's register allocation, and the emulator refuses such lanes, which
// were a third of version 2's kernels.
const Version = 3

// defaultNaN64 is the NaN a double operation makes from numbers.
const defaultNaN64 = 0xfff8000000000000

// oneNaN64 is w, or the default NaN for a double NaN w from version 3 on.
func oneNaN64(version int, w uint64) uint64 {
	if version >= 3 && w&0x7ff0000000000000 == 0x7ff0000000000000 && w&0xfffffffffffff != 0 {
		return defaultNaN64
	}
	return w
}

// MinVersion is the oldest version Generate still reproduces, so that a
// corpus recorded with it stays usable until it is recorded again.
const MinVersion = 1

// Options select what GenerateWith makes of a seed.
type Options struct {
	// Version is the generator version, MinVersion to Version; 0 means
	// Version.
	Version int
	// MaxStmts, when positive, stops after that many top-level
	// statements: the program is a prefix of the seed's full program
	// (the same first statements, the same inputs), which lets a fault
	// be narrowed down to the statement that causes it.
	MaxStmts int
}

// Kernel parameters, in order: the input buffer, the exact outputs, the
// approximate outputs, and one 32-bit scalar.
const (
	inStride    = 64 // bytes of input per thread
	approxLanes = 4  // threads 0..3 write the approximate outputs
	accBytes    = 64 // global atomic accumulators at the start of out
)

// Program is one generated kernel and everything needed to run it.
type Program struct {
	Seed    uint64
	Version int
	PTX     string
	Grid    uint32 // blocks, along x
	Block   uint32 // threads per block, along x
	In      []byte // the input buffer
	OutInit []byte // the exact-output buffer's contents before the launch
	// ApproxLen is the size of the approximate-output buffer, which
	// starts zeroed; only threads 0..3 write it.
	ApproxLen int
	Scalar    uint32
	// Slots lay out each thread's exact outputs (after the accumulators,
	// at accBytes + thread*OutStride): one per register live at the end.
	Slots     []Slot
	OutStride int
	// Approx lay out the approximate outputs of one lane (at
	// lane*ApproxStride in the approximate buffer).
	Approx       []ApproxSlot
	ApproxStride int
	// Families counts the instructions emitted per family.
	Families map[string]int
	// regs are the observable registers, for Explain.
	regs map[string]*reg
	// The kernel's text in parts, for Trace: everything before the
	// entry's register declarations, the declarations, and the body's
	// lines with what the generator knows of each.
	head, decls string
	body        []string
	lines       []lineInfo
	// stmts holds the body line at which each top-level statement
	// starts, and then the line at which the epilogue starts.
	stmts []int
	// addrs are the registers that hold addresses, which differ between
	// devices and which a trace therefore does not record.
	addrs map[string]bool
}

// Stmts is the number of top-level statements: a MaxStmts of k < Stmts
// makes a strict prefix.
func (p *Program) Stmts() int { return len(p.stmts) - 1 }

// StmtText is the text of top-level statement k (1-based), as it
// appears in the kernel's body.
func (p *Program) StmtText(k int) string {
	if k < 1 || k > p.Stmts() {
		return ""
	}
	return strings.Join(p.body[p.stmts[k-1]:p.stmts[k]], "")
}

// lineInfo is what the generator knows of one line of the kernel's body.
type lineInfo struct {
	// mult bounds how often the line runs: the product of the trip
	// counts (plus one) of the loops around it.
	mult int
	// noTrace marks an instruction whose result depends on the order in
	// which threads run (an atomic's old value on a shared accumulator),
	// which a trace must not record.
	noTrace bool
}

// Slot is one exact output of every thread.
type Slot struct {
	Off, Size int
	Reg       string
	Last      string // the last instruction that wrote the register
}

// ApproxSlot is one approximate result of threads 0..3: the
// instruction, where its result is, and which exact slot holds its input.
type ApproxSlot struct {
	Op     string // e.g. "ex2.approx.f32"
	Off    int
	Size   int
	Input  int // index into Slots of the first operand
	Input2 int // index of the second operand (div), or -1
}

// OutLen is the size of the exact-output buffer.
func (p *Program) OutLen() int { return accBytes + int(p.Grid*p.Block)*p.OutStride }

// Threads is the launch's thread count.
func (p *Program) Threads() int { return int(p.Grid * p.Block) }

type class uint8

const (
	cP  class = iota // .pred
	cH               // .b16
	cR               // .b32
	cD               // .b64
	cF               // .f32
	cFD              // .f64
	nClass
)

var (
	classDecl   = [nClass]string{".pred", ".b16", ".b32", ".b64", ".f32", ".f64"}
	classPrefix = [nClass]string{"%p", "%h", "%r", "%rd", "%f", "%fd"}
	classBytes  = [nClass]int{1, 2, 4, 8, 4, 8}
)

type reg struct {
	name   string
	cls    class
	last   string
	writes int // instructions that write it (inputs: 0)
	view   inputView
}

// inputView says how a register holding an input was made from the
// thread's input words: word w, and the part of it (d: all 64 bits, lo,
// hi, h0/h1: the 16-bit halves of lo, p: lo < hi as signed).
type inputView struct {
	word int
	part string
}

type gen struct {
	r       *rng
	version int
	body    strings.Builder
	lines   []lineInfo
	mult    int  // the loop multiplier of the lines written now
	noTrace bool // the lines written now are not traced
	addrs   map[string]bool
	funcs   strings.Builder
	nreg    [nClass]int
	pool    [nClass][]*reg
	byName  map[string]*reg
	depth   int
	loops   int
	labels  int
	// warp is true when every warp is full, so warp-wide instructions
	// with a full member mask are defined.
	warp bool
	// member is, inside an if on a predicate whose ballot was taken, the
	// register holding that ballot: the exact set of lanes executing.
	member   string
	fams     map[string]int
	approx   []ApproxSlot
	approxIn [][2]string // the registers each approximate result read
	aoff     int
	helpers  int
	noGuard  bool // the instruction must run on every lane that reaches it
	// the global accumulators: one order-independent operation each
	accs     []accOp
	accLimit []int
	ownOff   int // where the own-slot atomics' words are in a thread's slots
	prog     *Program
	// the kernel's fixed registers
	in, out, aout, own, ownA, acc, gtid, tid, lane, w0, alane string
}

func (g *gen) emit(format string, args ...any) {
	g.write("\t" + fmt.Sprintf(format, args...) + ";\n")
}

// write appends text (whole lines) to the body, noting for each line its
// loop multiplier and whether it is traced.
func (g *gen) write(text string) {
	g.body.WriteString(text)
	for range strings.Count(text, "\n") {
		g.lines = append(g.lines, lineInfo{mult: g.mult, noTrace: g.noTrace})
	}
}

// addr notes registers that hold addresses.
func (g *gen) addr(regs ...string) {
	for _, r := range regs {
		g.addrs[r] = true
	}
}

// emitUntraced emits an instruction whose result a trace must not record.
func (g *gen) emitUntraced(format string, args ...any) {
	g.noTrace = true
	g.emit(format, args...)
	g.noTrace = false
}

func (g *gen) label() string {
	g.labels++
	return fmt.Sprintf("$L%d", g.labels)
}

func (g *gen) place(l string) { g.write(l + ":\n") }

// tmp declares a register that is not an output.
func (g *gen) tmp(c class) string {
	n := fmt.Sprintf("%s%d", classPrefix[c], g.nreg[c])
	g.nreg[c]++
	return n
}

// use returns an observable register of class c as an operand.
func (g *gen) use(c class) string {
	if len(g.pool[c]) == 0 {
		panic(fmt.Sprintf("no register of class %s", classDecl[c]))
	}
	// Prefer recent registers: results feed into later instructions.
	n := len(g.pool[c])
	i := n - 1 - g.r.intn(min(n, 12))
	if g.r.chance(0.3) {
		i = g.r.intn(n)
	}
	return g.pool[c][i].name
}

// def writes a result of class c through emitText(d). At the top level it
// usually makes a new observable register; inside a region, or at times
// at the top level, it overwrites one, possibly under a guard.
func (g *gen) def(fam string, c class, emitText func(d string) string) {
	g.fams[fam]++
	fresh := g.depth == 0 && (g.r.chance(0.75) || len(g.pool[c]) < 2)
	if fresh {
		d := g.tmp(c)
		text := emitText(d)
		if strings.HasPrefix(text, "{") {
			g.write("\t" + text + "\n")
		} else {
			g.emit("%s", text)
		}
		rg := &reg{name: d, cls: c, last: text, writes: 1}
		g.pool[c] = append(g.pool[c], rg)
		g.byName[d] = rg
		return
	}
	rg := g.pool[c][g.r.intn(len(g.pool[c]))]
	rg.writes++
	text := emitText(rg.name)
	if strings.HasPrefix(text, "{") {
		// a block (a call sequence): written as is, never guarded
		g.write("\t" + text + "\n")
		rg.last = text
		return
	}
	guard := ""
	if !g.noGuard && len(g.pool[cP]) > 0 && g.r.chance(0.15) && c != cP {
		neg := ""
		if g.r.chance(0.5) {
			neg = "!"
		}
		guard = "@" + neg + g.use(cP) + " "
	}
	g.emit("%s%s", guard, text)
	rg.last = guard + text
}

// def2 writes two results at once (setp p|q, shfl d|p, ...): both go to
// new registers at the top level, or overwrite two inside a region.
func (g *gen) def2(fam string, c1, c2 class, emitText func(d1, d2 string) string) {
	g.fams[fam]++
	var d1, d2 string
	var n1, n2 *reg
	if g.depth == 0 {
		d1, d2 = g.tmp(c1), g.tmp(c2)
	} else {
		n1 = g.pool[c1][g.r.intn(len(g.pool[c1]))]
		n2 = g.pool[c2][g.r.intn(len(g.pool[c2]))]
		d1, d2 = n1.name, n2.name
		if n1 == n2 {
			// one register cannot take both results: the second goes
			// to a register nothing reads
			n2 = &reg{}
			d2 = g.tmp(c2)
		}
	}
	text := emitText(d1, d2)
	g.emit("%s", text)
	if g.depth == 0 {
		for _, x := range []struct {
			n string
			c class
		}{{d1, c1}, {d2, c2}} {
			rg := &reg{name: x.n, cls: x.c, last: text, writes: 1}
			g.pool[x.c] = append(g.pool[x.c], rg)
			g.byName[x.n] = rg
		}
		return
	}
	n1.last, n2.last = text, text
	n1.writes++
	n2.writes++
}

// intClass is the register class of an integer type's width.
func intClass(bits int) class {
	switch bits {
	case 16:
		return cH
	case 32:
		return cR
	}
	return cD
}

// imm is an immediate for an integer type of the given width: an edge
// value or a small one, written as PTX reads it.
func (g *gen) imm(bits int, signed bool) string {
	var v uint64
	switch g.r.intn(4) {
	case 0:
		v = pick(g.r, edgeInt64)
	case 1:
		v = uint64(g.r.intn(64))
	case 2:
		v = uint64(-int64(g.r.intn(64) + 1))
	default:
		v = g.r.u64()
	}
	if bits < 64 {
		v &= 1<<bits - 1
	}
	if signed && bits < 64 && v>>(bits-1)&1 == 1 {
		return fmt.Sprintf("%d", int64(v|^(1<<bits-1)))
	}
	if signed {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("0x%X", v)
}

// opnd is a register of class c, or now and then an immediate of the
// integer type t (bits, signedness).
func (g *gen) opnd(c class, bits int, signed bool) string {
	if g.r.chance(0.2) {
		return g.imm(bits, signed)
	}
	return g.use(c)
}

// fimm is a float immediate, in PTX's exact hex form.
func (g *gen) fimm(c class) string {
	if c == cF {
		return fmt.Sprintf("0f%08X", g.r.f32Word())
	}
	if g.r.chance(0.4) {
		return fmt.Sprintf("0d%016X", oneNaN64(g.version, pick(g.r, edgeF64)))
	}
	return fmt.Sprintf("0d%016X", g.r.niceF64())
}

func (g *gen) fopnd(c class) string {
	if g.r.chance(0.15) {
		return g.fimm(c)
	}
	return g.use(c)
}

// Generate makes the program of seed. The same seed and Version always
// give the same program, byte for byte.
func Generate(seed uint64) *Program { return GenerateWith(seed, Options{}) }

// GenerateWith makes the program of seed under o. It panics on a version
// it cannot generate (see CheckVersion).
func GenerateWith(seed uint64, o Options) *Program {
	v := o.Version
	if v == 0 {
		v = Version
	}
	if err := CheckVersion(v); err != nil {
		panic(err)
	}
	r := newRNG(seed, v)
	p := &Program{Seed: seed, Version: v, Scalar: r.u32()}
	g := &gen{r: r, version: v, mult: 1, byName: map[string]*reg{}, fams: map[string]int{}, prog: p, addrs: map[string]bool{}}
	// Launch shape: mostly whole warps, which warp-wide instructions
	// need; sometimes a partial warp, and then no warp-wide instruction.
	p.Grid = uint32(1 + r.intn(2))
	p.Block = uint32(32 * (1 + r.intn(4)))
	g.warp = true
	if r.chance(0.12) {
		p.Block = uint32(1 + r.intn(127))
		g.warp = p.Block%32 == 0
	}
	threads := p.Threads()
	p.In = make([]byte, threads*inStride)
	for i := 0; i < len(p.In); i += 8 {
		w := oneNaN64(v, r.inputWord())
		for j := 0; j < 8; j++ {
			p.In[i+j] = byte(w >> (8 * j))
		}
	}
	for i := 0; i < accBytes/8; i++ {
		g.accs = append(g.accs, pick(r, accOps))
		g.accLimit = append(g.accLimit, 1+r.intn(1000))
	}
	g.prologue()
	n := 30 + r.intn(60)
	if o.MaxStmts > 0 {
		n = min(n, o.MaxStmts)
	}
	for i := 0; i < n; i++ {
		p.stmts = append(p.stmts, len(g.lines))
		g.stmt()
	}
	p.stmts = append(p.stmts, len(g.lines))
	g.epilogue()
	p.PTX = g.module()
	p.Families = g.fams
	p.addrs = g.addrs
	p.regs = g.byName
	return p
}

// prologue loads the thread's inputs and makes views of them in every
// register class.
func (g *gen) prologue() {
	g.in, g.out, g.aout = g.tmp(cD), g.tmp(cD), g.tmp(cD)
	g.own, g.acc = g.tmp(cD), g.tmp(cD)
	g.addr(g.in, g.out, g.aout, g.own, g.acc)
	g.gtid, g.tid, g.lane = g.tmp(cR), g.tmp(cR), g.tmp(cR)
	g.w0 = g.tmp(cP)
	ctaid, ntid, t64 := g.tmp(cR), g.tmp(cR), g.tmp(cD)
	g.emit("ld.param.u64 %s, [pin]", g.in)
	g.emit("ld.param.u64 %s, [pout]", g.out)
	g.emit("ld.param.u64 %s, [paout]", g.aout)
	g.emit("cvta.to.global.u64 %s, %s", g.in, g.in)
	g.emit("cvta.to.global.u64 %s, %s", g.out, g.out)
	g.emit("cvta.to.global.u64 %s, %s", g.aout, g.aout)
	g.emit("mov.u32 %s, %%tid.x", g.tid)
	g.emit("mov.u32 %s, %%ctaid.x", ctaid)
	g.emit("mov.u32 %s, %%ntid.x", ntid)
	g.emit("mov.u32 %s, %%laneid", g.lane)
	g.emit("mad.lo.s32 %s, %s, %s, %s", g.gtid, ctaid, ntid, g.tid)
	g.emit("setp.lt.u32 %s, %s, %d", g.w0, g.gtid, approxLanes)
	g.emit("mul.wide.u32 %s, %s, %d", t64, g.gtid, inStride)
	g.emit("add.s64 %s, %s, %s", g.in, g.in, t64)
	g.emit("mov.u64 %s, %s", g.acc, g.out)
	// own is this thread's slot area; its size is known only at the end.
	g.emit("mul.wide.u32 %s, %s, OUTSTRIDE", t64, g.gtid)
	g.emit("add.s64 %s, %s, %s", g.own, g.out, t64)
	g.emit("add.s64 %s, %s, %d", g.own, g.own, accBytes)
	g.ownA = g.tmp(cD)
	g.addr(g.ownA)
	g.emit("add.s64 %s, %s, OWNOFF", g.ownA, g.own)
	g.alane = g.tmp(cD)
	g.addr(g.alane)
	g.emit("mul.wide.u32 %s, %s, ASTRIDE", t64, g.gtid)
	g.emit("add.s64 %s, %s, %s", g.alane, g.aout, t64)
	// Local memory starts zeroed by its first stores.
	g.emit("mov.b64 %s, 0", t64)
	for i := 0; i < 64; i += 8 {
		g.emit("st.local.u64 [lbuf+%d], %s", i, t64)
	}
	// The inputs, and views of them in every class.
	words := make([]string, inStride/8)
	for i := range words {
		d := g.tmp(cD)
		g.emit("ld.global.u64 %s, [%s+%d]", d, g.in, 8*i)
		g.pool[cD] = append(g.pool[cD], &reg{name: d, cls: cD, last: "input", view: inputView{i, "d"}})
		words[i] = d
	}
	for i, w := range words {
		lo, hi := g.tmp(cR), g.tmp(cR)
		g.emit("mov.b64 {%s, %s}, %s", lo, hi, w)
		g.pool[cR] = append(g.pool[cR], &reg{name: lo, cls: cR, last: "input", view: inputView{i, "lo"}},
			&reg{name: hi, cls: cR, last: "input", view: inputView{i, "hi"}})
		switch i % 4 {
		case 0:
			f1, f2 := g.tmp(cF), g.tmp(cF)
			g.emit("mov.b32 %s, %s", f1, lo)
			g.emit("mov.b32 %s, %s", f2, hi)
			g.pool[cF] = append(g.pool[cF], &reg{name: f1, cls: cF, last: "input", view: inputView{i, "lo"}},
				&reg{name: f2, cls: cF, last: "input", view: inputView{i, "hi"}})
		case 1:
			fd := g.tmp(cFD)
			g.emit("mov.b64 %s, %s", fd, w)
			g.pool[cFD] = append(g.pool[cFD], &reg{name: fd, cls: cFD, last: "input", view: inputView{i, "d"}})
		case 2:
			h1, h2 := g.tmp(cH), g.tmp(cH)
			g.emit("mov.b32 {%s, %s}, %s", h1, h2, lo)
			g.pool[cH] = append(g.pool[cH], &reg{name: h1, cls: cH, last: "input", view: inputView{i, "h0"}},
				&reg{name: h2, cls: cH, last: "input", view: inputView{i, "h1"}})
		case 3:
			p := g.tmp(cP)
			g.emit("setp.lt.s32 %s, %s, %s", p, lo, hi)
			g.pool[cP] = append(g.pool[cP], &reg{name: p, cls: cP, last: "input", view: inputView{i, "p"}})
		}
	}
	for c := range nClass {
		for _, rg := range g.pool[c] {
			g.byName[rg.name] = rg
		}
	}
}

// epilogue stores every observable register into the thread's slots, and
// lays the slots out.
func (g *gen) epilogue() {
	p := g.prog
	// Registers that still hold an input unchanged add nothing: the
	// input is known.
	var regs []*reg
	for c := range nClass {
		for _, rg := range g.pool[c] {
			if rg.last != "input" {
				regs = append(regs, rg)
			}
		}
	}
	// Widest first keeps every slot naturally aligned.
	sort.SliceStable(regs, func(i, j int) bool { return classBytes[regs[i].cls] > classBytes[regs[j].cls] })
	off := 0
	for _, rg := range regs {
		size := classBytes[rg.cls]
		switch rg.cls {
		case cP:
			t := g.tmp(cH)
			g.emit("selp.u16 %s, 1, 0, %s", t, rg.name)
			g.emit("st.global.u8 [%s+%d], %s", g.own, off, t)
		case cH:
			g.emit("st.global.b16 [%s+%d], %s", g.own, off, rg.name)
		case cR, cF:
			g.emit("st.global.b32 [%s+%d], %s", g.own, off, rg.name)
		default:
			g.emit("st.global.b64 [%s+%d], %s", g.own, off, rg.name)
		}
		p.Slots = append(p.Slots, Slot{Off: off, Size: size, Reg: rg.name, Last: rg.last})
		off += size
	}
	// The own-slot atomics' words follow the registers.
	off = (off + 7) &^ 7
	g.ownOff = off
	p.OutStride = off + 16
	// Approximate results resolve their inputs' slots now.
	slotOf := map[string]int{}
	for i, s := range p.Slots {
		slotOf[s.Reg] = i
	}
	for i := range g.approx {
		a := &g.approx[i]
		a.Input = slotOf[g.approxIn[i][0]]
		a.Input2 = -1
		if g.approxIn[i][1] != "" {
			a.Input2 = slotOf[g.approxIn[i][1]]
		}
	}
	p.Approx = g.approx
	p.ApproxStride = (g.aoff + 7) &^ 7
	p.ApproxLen = approxLanes * p.ApproxStride
	g.emit("ret")
	p.OutInit = make([]byte, p.OutLen())
	for i := range p.OutInit {
		p.OutInit[i] = byte(g.r.u64())
	}
	// The accumulators start from edge and random values; float sums
	// start from a small integer, so that no addition rounds and the
	// total does not depend on the order of the threads.
	for i, a := range g.accs {
		w := g.r.inputWord()
		switch a.ty {
		case "f32":
			w = uint64(math.Float32bits(float32(g.r.intn(1000))))
		case "f64":
			w = math.Float64bits(float64(g.r.intn(1000)))
		}
		for j := 0; j < 8; j++ {
			p.OutInit[8*i+j] = byte(w >> (8 * j))
		}
	}
}

// entryParams are the kernel's parameters; a trace adds one.
const entryParams = ".param .u64 pin, .param .u64 pout, .param .u64 paout, .param .u32 pscalar"

// module assembles the PTX text, and keeps its parts for Trace.
func (g *gen) module() string {
	p := g.prog
	var head, decls strings.Builder
	fmt.Fprintf(&head, "// gpuctl ptxgen version %d seed %#x: %d blocks of %d threads\n", g.version, p.Seed, p.Grid, p.Block)
	head.WriteString(".version 8.0\n.target sm_90\n.address_size 64\n\n")
	head.WriteString(g.funcs.String())
	for c := range nClass {
		if g.nreg[c] > 0 {
			fmt.Fprintf(&decls, "\t.reg %s %s<%d>;\n", classDecl[c], classPrefix[c], g.nreg[c])
		}
	}
	fmt.Fprintf(&decls, "\t.shared .align 16 .b8 sbuf[%d];\n", shBytes(p.Block))
	decls.WriteString("\t.shared .align 8 .b8 sacc[64];\n")
	decls.WriteString("\t.local .align 16 .b8 lbuf[64];\n")
	body := strings.ReplaceAll(g.body.String(), "OUTSTRIDE", fmt.Sprint(p.OutStride))
	body = strings.ReplaceAll(body, "ASTRIDE", fmt.Sprint(p.ApproxStride))
	body = strings.ReplaceAll(body, "OWNOFF", fmt.Sprint(g.ownOff))
	p.head, p.decls = head.String(), decls.String()
	p.body = strings.SplitAfter(body, "\n")
	p.body = p.body[:len(p.body)-1] // the empty string after the last newline
	p.lines = g.lines
	if len(p.body) != len(p.lines) {
		panic(fmt.Sprintf("ptxgen: %d body lines but %d line notes", len(p.body), len(p.lines)))
	}
	return p.head + ".visible .entry k(" + entryParams + ")\n{\n" + p.decls + body + "}\n"
}

// CheckVersion reports whether Generate can make programs of version v.
func CheckVersion(v int) error {
	if v < MinVersion || v > Version {
		return fmt.Errorf("generator version %d: this generator makes versions %d to %d", v, MinVersion, Version)
	}
	return nil
}

// shBytes is the shared buffer: 16 bytes per thread.
func shBytes(block uint32) int { return int(block) * 16 }
