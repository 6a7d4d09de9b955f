package ptx

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// state spaces of memory instructions
const (
	spGeneric uint8 = iota
	spGlobal
	spShared
	spLocal
	spConst
	spParam
)

// barrier instruction flags (inst.aux)
const (
	barWaits   = 1 << 16
	barReduces = 1 << 17
	redPopc    = 1
	redAnd     = 2
	redOr      = 3
)

type fillKind uint8

const (
	fillSpecial fillKind = iota
	fillGlobal
	fillLocal
	fillShared
)

// fill initialises a register slot when a frame starts: special registers,
// addresses of module variables (known only once bound) and addresses of
// the frame's local variables.
type fill struct {
	slot int32
	kind fillKind
	idx  int32
}

type callInfo struct {
	name    string
	callee  *cfunc
	builtin func(w *warp, fr *frame, in *inst, em uint32)
	args    []Param // argument variables in the caller's parameter area
	rets    []Param // return variables in the caller's parameter area
}

// cfunc is a compiled .entry or .func.
type cfunc struct {
	name      string
	entry     bool
	maxntid   [3]int // .maxntid, zero if absent
	reqntid   [3]int // .reqntid, zero if absent
	code      []inst
	template  []uint64
	fills     []fill
	nregs     int
	localSize uint32
	paramSize int     // per-lane parameter area (.func params, returns, call arguments)
	paramOffs []Param // .func parameters in the area
	retOffs   []Param // .func return values in the area
	kparams   []Param // .entry parameters in the launch buffer
	calls     []*inst

	sharedRefs   map[int]bool // module shared variables this function uses
	sharedOff    []uint32     // kernels: offset of each module shared variable
	staticShared uint32       // kernels: bytes of static shared memory
	dynOff       uint32       // kernels: where dynamic shared memory starts
	hasDyn       bool         // kernels: uses .extern .shared
}

type symKind uint8

const (
	symReg symKind = iota
	symLocal
	symParam  // per-lane parameter area
	symKParam // kernel parameter buffer
	symShared
	symGlobal
)

type sym struct {
	kind symKind
	slot int32
	typ  ptype
	off  uint32
	size uint32
	idx  int
}

type gvar struct {
	decl  *varDecl
	index int
}

// fcomp compiles one function.
type fcomp struct {
	m       *Module
	f       *cfunc
	scopes  []map[string]*sym
	consts  map[uint64]int32
	special map[int]int32
	addrs   map[[2]int64]int32
	labels  map[string]int32
	fixups  []fixup
	nslots  int32
	cvals   [][2]uint64
	cur     *instr
	scratch int32
	carry   int32 // the condition code's slot, -1 until used
	// signRead names the registers read where a NaN's sign matters
	// (signReads).
	signRead map[string]bool
	guarded  map[string]int      // guarded instructions writing each register
	slctSel  map[string]bool     // registers used as slct selectors
	defs     map[string][]*instr // the instructions writing each register (bodyDefs)
	body     []stmt              // the function body being compiled
	at       int                 // the index in body of the statement being compiled
	preds    [][]int             // bodyPreds of body, made when first needed
}

type fixup struct {
	pc    int
	label string
	in    *instr
}

// compileError is an error in an otherwise well-formed module, such as an
// undeclared register.
type compileError struct {
	line int
	msg  string
}

func (e *compileError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func (c *fcomp) failf(format string, args ...any) {
	line := 0
	if c.cur != nil {
		line = c.cur.line
	}
	panic(&compileError{line: line, msg: fmt.Sprintf(format, args...)})
}

// unsupported marks an instruction the emulator cannot execute. Compiling
// goes on; executing the instruction fails the launch with
// CUDA_ERROR_NOT_SUPPORTED naming it.
type unsupportedError struct{ what string }

// maxSlots bounds a function's register slots (declared registers,
// constants and temporaries): each costs 256 bytes per warp.
const maxSlots = 1 << 16

func (c *fcomp) newSlot() int32 {
	s := c.nslots
	if s >= maxSlots {
		c.failf("function uses more than %d registers and constants", maxSlots)
	}
	c.nslots++
	return s
}

func (c *fcomp) lookup(name string) *sym {
	for i := len(c.scopes) - 1; i >= 0; i-- {
		if s, ok := c.scopes[i][name]; ok {
			return s
		}
	}
	return nil
}

func (c *fcomp) declare(name string, s *sym) {
	c.scopes[len(c.scopes)-1][name] = s
}

func (c *fcomp) constSlot(v uint64) int32 {
	if s, ok := c.consts[v]; ok {
		return s
	}
	s := c.newSlot()
	c.consts[v] = s
	c.cvals = append(c.cvals, [2]uint64{uint64(s), v})
	return s
}

func (c *fcomp) specialSlot(id int) int32 {
	if s, ok := c.special[id]; ok {
		return s
	}
	s := c.newSlot()
	c.special[id] = s
	c.f.fills = append(c.f.fills, fill{slot: s, kind: fillSpecial, idx: int32(id)})
	return s
}

// addrSlot holds the address of a module variable or a local variable.
func (c *fcomp) addrSlot(kind fillKind, idx int32) int32 {
	key := [2]int64{int64(kind), int64(idx)}
	if s, ok := c.addrs[key]; ok {
		return s
	}
	s := c.newSlot()
	c.addrs[key] = s
	c.f.fills = append(c.f.fills, fill{slot: s, kind: kind, idx: idx})
	return s
}

// sharedSlot holds the shared-state-space address of module shared
// variable idx, which depends on the kernel being launched.
func (c *fcomp) sharedSlot(idx int) int32 {
	if c.f.sharedRefs == nil {
		c.f.sharedRefs = map[int]bool{}
	}
	c.f.sharedRefs[idx] = true
	return c.addrSlot(fillShared, int32(idx))
}

// immBits converts a literal to the bit pattern of type t.
func immBits(o operand, t ptype) uint64 {
	if o.kind == oFImm {
		switch t {
		case tF32:
			if o.f64 {
				return uint64(math.Float32bits(float32(math.Float64frombits(o.ival))))
			}
			return o.ival
		case tF64:
			if !o.f64 {
				return math.Float64bits(float64(math.Float32frombits(uint32(o.ival))))
			}
			return o.ival
		case tF16:
			f := math.Float64frombits(o.ival)
			if !o.f64 {
				f = float64(math.Float32frombits(uint32(o.ival)))
			}
			return uint64(f32ToF16(float32(f)))
		}
		return o.ival
	}
	if t == tF32 || t == tF64 {
		// integer literal for a float operand: its value
		if t == tF32 {
			return uint64(math.Float32bits(float32(int64(o.ival))))
		}
		return math.Float64bits(float64(int64(o.ival)))
	}
	return o.ival & t.mask()
}

// val returns the slot holding operand o read as type t.
func (c *fcomp) val(o operand, t ptype) int32 {
	var s int32
	switch o.kind {
	case oImm, oFImm:
		s = c.constSlot(immBits(o, t))
	case oReg, oSym:
		s = c.nameSlot(o)
	case oSink:
		s = c.sink()
	default:
		c.failf("operand of unexpected form in `%s`", c.cur.text)
	}
	if o.neg {
		tmp := c.newSlot()
		c.emit(inst{fn: opNotPred, d: tmp, a: s, src: c.cur})
		s = tmp
	}
	return s
}

// carrySlot is the per-thread condition code (CC.CF).
func (c *fcomp) carrySlot() int32 {
	if c.carry < 0 {
		c.carry = c.newSlot()
	}
	return c.carry
}

func (c *fcomp) sink() int32 {
	if c.scratch < 0 {
		c.scratch = c.newSlot()
	}
	return c.scratch
}

var dynamicSpecials = map[string]bool{
	"%clock": true, "%clock64": true, "%globaltimer": true, "%globaltimer_lo": true, "%globaltimer_hi": true,
	"%clock_hi": true,
}

func (c *fcomp) nameSlot(o operand) int32 {
	if id, ok := specialNames[o.name]; ok {
		return c.specialSlot(id)
	}
	if dynamicSpecials[o.name] {
		tmp := c.newSlot()
		c.emit(inst{fn: opClock(o.name), d: tmp, src: c.cur})
		return tmp
	}
	if o.name == "WARP_SZ" {
		return c.constSlot(warpSize)
	}
	s := c.lookup(o.name)
	if s == nil {
		if strings.HasPrefix(o.name, "%envreg") || strings.HasPrefix(o.name, "%pm") {
			return c.constSlot(0)
		}
		c.failf("%q is not declared", o.name)
	}
	switch s.kind {
	case symReg:
		if o.ival != 0 {
			c.failf("offset on register %q", o.name)
		}
		return s.slot
	case symShared:
		slot := c.sharedSlot(s.idx)
		if o.ival != 0 {
			tmp := c.newSlot()
			c.emit(inst{fn: opAddImm, d: tmp, a: slot, off: o.ival, src: c.cur})
			return tmp
		}
		return slot
	case symGlobal:
		if o.ival != 0 {
			tmp := c.newSlot()
			c.emit(inst{fn: opAddImm, d: tmp, a: c.addrSlot(fillGlobal, int32(s.idx)), off: o.ival, src: c.cur})
			return tmp
		}
		return c.addrSlot(fillGlobal, int32(s.idx))
	case symLocal:
		return c.addrSlot(fillLocal, int32(s.off+uint32(o.ival)))
	case symKParam:
		// The parameter-space address of a kernel parameter: its offset
		// in the parameter buffer (for cvta.param and ld.param [%rd]).
		return c.constSlot(uint64(s.off) + o.ival)
	}
	panic(&unsupportedError{what: fmt.Sprintf("taking the address of function parameter %q", o.name)})
}

// dst returns the slot an instruction writes.
func (c *fcomp) dst(o operand) int32 {
	switch o.kind {
	case oSink:
		return c.sink()
	case oReg, oSym:
		s := c.lookup(o.name)
		if s == nil || s.kind != symReg {
			if _, ok := specialNames[o.name]; ok {
				c.failf("special register %s is read-only", o.name)
			}
			c.failf("%q is not a declared register", o.name)
		}
		return s.slot
	}
	c.failf("destination must be a register in `%s`", c.cur.text)
	return 0
}

// regType is the declared type of register operand o; the sink `_` and
// anything that is not a register count as 64 bits wide.
func (c *fcomp) regType(o operand) ptype {
	if o.kind == oReg || o.kind == oSym {
		if s := c.lookup(o.name); s != nil && s.kind == symReg && s.typ != tNone {
			return s.typ
		}
	}
	return tB64
}

// widthMask is the mask of the widest of the registers os. Loads,
// conversions and atomics whose type is narrower than their destination
// extend the result to the register's width: sign extension for signed
// types, zero extension for the others (PTX ISA, "Operand Size Exceeding
// Instruction-Type Size"). Registers hold their value zero-extended from
// their own width, so a 32-bit register used as a shared-memory address
// never carries sign bits above bit 31.
func (c *fcomp) widthMask(os ...operand) uint64 {
	var m uint64
	for _, o := range os {
		rt := c.regType(o)
		if rt == tPred {
			m |= 1
			continue
		}
		m |= rt.mask()
	}
	return m
}

// emit appends an unguarded preparatory instruction that prepares an operand
// of the instruction being compiled.
func (c *fcomp) emit(in inst) {
	in.guard = -1
	in.d2 = -1
	c.f.code = append(c.f.code, in)
}

// compileModule lays out the module's variables and compiles every
// function with a body.
func compileModule(a *ast) (*Module, error) {
	m := &Module{
		ptxVersion:  a.verMajor*10 + a.verMinor,
		sm:          a.sm,
		varIndex:    map[string]int{},
		sharedIndex: map[string]int{},
		cfuncs:      map[string]*cfunc{},
		entries:     map[string]*Function{},
	}
	if a.addrSize != 64 {
		return nil, cu.Errorf(cu.ErrorInvalidPTX, ".address_size %d is not supported: only 64-bit PTX runs on this device", a.addrSize)
	}
	// Module-scope variables. Shared variables get an index here and an
	// offset per kernel, once it is known which of them the kernel reaches.
	addShared := func(key string, v *varDecl) error {
		if !v.extern && v.count >= 0 {
			al := v.alignment()
			if al == 0 || al&(al-1) != 0 || al > 1<<12 {
				return &compileError{line: v.line, msg: fmt.Sprintf("bad alignment %d", al)}
			}
			if v.size() > MaxSharedPerBlock {
				return &compileError{line: v.line, msg: fmt.Sprintf("shared variable %q of %d bytes exceeds the device's shared memory", v.name, v.size())}
			}
		}
		if _, dup := m.sharedIndex[key]; dup {
			return &compileError{line: v.line, msg: fmt.Sprintf("shared variable %q declared twice", v.name)}
		}
		m.sharedIndex[key] = len(m.sharedVars)
		m.sharedVars = append(m.sharedVars, v)
		return nil
	}
	for _, v := range a.vars {
		switch v.space {
		case "global", "const":
			if _, dup := m.varIndex[v.name]; dup {
				return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: %q declared twice", v.line, v.name)
			}
			init, err := initBytes(v)
			if err != nil {
				return nil, err
			}
			if v.extern {
				continue
			}
			if v.size() > 1<<32 {
				return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: variable %q is too large", v.line, v.name)
			}
			m.varIndex[v.name] = len(m.vars)
			m.vars = append(m.vars, Global{Name: v.name, Size: v.size(), Init: init})
			if v.space == "const" {
				m.constBytes += v.size()
			}
		case "shared":
			if err := addShared(v.name, v); err != nil {
				return nil, cu.Errorf(cu.ErrorInvalidPTX, "%v", err)
			}
		}
	}
	for _, f := range a.funcs {
		for _, s := range f.body {
			if s.kind == stDecl && s.decl.space == "shared" {
				if err := addShared(f.name+"\x00"+s.decl.name, s.decl); err != nil {
					return nil, cu.Errorf(cu.ErrorInvalidPTX, "%v", err)
				}
			}
		}
	}
	m.gaddr = make([]uint64, len(m.vars))
	m.bound = make([]bool, len(m.vars))

	// Functions: first declare all, then compile bodies, then link calls.
	decls := map[string]*funcDecl{}
	for _, f := range a.funcs {
		if old, ok := decls[f.name]; ok && old.hasBody && f.hasBody {
			return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: function %q defined twice", f.line, f.name)
		}
		if f.hasBody || decls[f.name] == nil {
			decls[f.name] = f
		}
	}
	for _, f := range a.funcs {
		if !f.hasBody || m.cfuncs[f.name] != nil {
			continue
		}
		cf, err := m.compileFunc(f)
		if err != nil {
			return nil, err
		}
		m.cfuncs[f.name] = cf
		if f.entry {
			m.entries[f.name] = &Function{m: m, cf: cf}
			m.entryOrder = append(m.entryOrder, f.name)
		}
	}
	for _, cf := range m.cfuncs {
		for _, in := range cf.calls {
			ci := in.call
			if b, ok := builtins[ci.name]; ok && m.cfuncs[ci.name] == nil {
				ci.builtin = b
				continue
			}
			callee := m.cfuncs[ci.name]
			if callee == nil {
				if decls[ci.name] == nil {
					return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: call to undeclared function %q", in.src.line, ci.name)
				}
				continue // fails when executed
			}
			if callee.entry {
				return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: call to kernel %q", in.src.line, ci.name)
			}
			if len(ci.args) != len(callee.paramOffs) || len(ci.rets) != len(callee.retOffs) {
				return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: call to %q passes %d arguments and %d results; it takes %d and %d",
					in.src.line, ci.name, len(ci.args), len(ci.rets), len(callee.paramOffs), len(callee.retOffs))
			}
			ci.callee = callee
		}
	}
	for _, name := range m.entryOrder {
		if err := m.layoutShared(m.cfuncs[name]); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// layoutShared places the shared variables that kernel k and the
// functions it calls use: static ones in declaration order, then the
// dynamic (.extern) region, which all extern arrays share.
func (m *Module) layoutShared(k *cfunc) error {
	used := map[int]bool{}
	seen := map[*cfunc]bool{}
	var walk func(f *cfunc)
	walk = func(f *cfunc) {
		if seen[f] {
			return
		}
		seen[f] = true
		for i := range f.sharedRefs {
			used[i] = true
		}
		for _, in := range f.calls {
			if in.call.callee != nil {
				walk(in.call.callee)
			}
		}
	}
	walk(k)
	k.sharedOff = make([]uint32, len(m.sharedVars))
	var off uint64
	dynAlign := uint64(16)
	for i, v := range m.sharedVars {
		if !used[i] {
			continue
		}
		if v.extern || v.count < 0 {
			k.hasDyn = true
			dynAlign = max(dynAlign, v.alignment())
			continue
		}
		off = (off + v.alignment() - 1) &^ (v.alignment() - 1)
		k.sharedOff[i] = uint32(off)
		off += v.size()
		if off > MaxSharedPerBlock {
			return cu.Errorf(cu.ErrorInvalidPTX, "kernel %s declares %d bytes of static shared memory; the device has %d", k.name, off, MaxSharedPerBlock)
		}
	}
	k.staticShared = uint32(off)
	k.dynOff = uint32((off + dynAlign - 1) &^ (dynAlign - 1))
	for i, v := range m.sharedVars {
		if used[i] && (v.extern || v.count < 0) {
			k.sharedOff[i] = k.dynOff
		}
	}
	return nil
}

func (m *Module) compileFunc(f *funcDecl) (cf *cfunc, err error) {
	cf = &cfunc{name: f.name, entry: f.entry, maxntid: f.maxntid, reqntid: f.reqntid}
	c := &fcomp{
		m: m, f: cf,
		scopes:  []map[string]*sym{{}},
		consts:  map[uint64]int32{},
		special: map[int]int32{},
		addrs:   map[[2]int64]int32{},
		labels:  map[string]int32{},
		scratch: -1,
		carry:   -1,
	}
	defer func() {
		switch r := recover().(type) {
		case nil:
		case *compileError:
			cf, err = nil, cu.Errorf(cu.ErrorInvalidPTX, "function %s: %v", f.name, r)
		case *unsupportedError:
			cf, err = nil, cu.Errorf(cu.ErrorNotSupported, "function %s: %s are not supported by the emulator", f.name, r.what)
		default:
			panic(r)
		}
	}()
	// module scope: shared and global variables
	for name, idx := range m.sharedIndex {
		if !strings.Contains(name, "\x00") {
			c.declare(name, &sym{kind: symShared, idx: idx})
		}
	}
	for name, idx := range m.varIndex {
		c.declare(name, &sym{kind: symGlobal, idx: idx})
	}
	c.scopes = append(c.scopes, map[string]*sym{})
	// parameters
	if f.entry {
		var off uint32
		for _, p := range f.params {
			al := uint32(p.alignment())
			if al == 0 || al&(al-1) != 0 || p.count < 0 {
				c.failf("bad kernel parameter %q", p.name)
			}
			off = alignUp32(off, al)
			sz := uint32(p.size())
			cf.kparams = append(cf.kparams, Param{Offset: off, Size: sz})
			c.declare(p.name, &sym{kind: symKParam, off: off, size: sz, typ: p.typ})
			off += sz
		}
	} else {
		var off uint32
		place := func(p *varDecl) Param {
			al := uint32(p.alignment())
			if al == 0 || al&(al-1) != 0 || p.count < 0 {
				c.failf("bad parameter %q", p.name)
			}
			off = alignUp32(off, al)
			sz := uint32(p.size())
			c.declare(p.name, &sym{kind: symParam, off: off, size: sz, typ: p.typ})
			r := Param{Offset: off, Size: sz}
			off += sz
			return r
		}
		for _, p := range f.params {
			cf.paramOffs = append(cf.paramOffs, place(p))
		}
		for _, p := range f.rets {
			cf.retOffs = append(cf.retOffs, place(p))
		}
		cf.paramSize = int(off)
	}
	c.signRead, c.guarded, c.slctSel = signReads(f.body), guardedWrites(f.body), slctSels(f.body)
	c.defs, c.body, c.preds = bodyDefs(f.body), f.body, nil
	for i, s := range f.body {
		c.at = i
		switch s.kind {
		case stOpen:
			c.scopes = append(c.scopes, map[string]*sym{})
		case stClose:
			c.scopes = c.scopes[:len(c.scopes)-1]
		case stLabel:
			if _, dup := c.labels[s.label]; dup {
				c.failf("label %q defined twice", s.label)
			}
			c.labels[s.label] = int32(len(cf.code))
		case stDecl:
			c.decl(s.decl)
		case stInstr:
			c.cur = s.in
			c.instr(s.in)
		}
	}
	// Falling off the end returns.
	c.cur = nil
	cf.code = append(cf.code, inst{ctl: cRet, guard: -1, src: &instr{text: "ret (end of function)", line: f.line}})
	for _, fx := range c.fixups {
		t, ok := c.labels[fx.label]
		if !ok {
			c.cur = fx.in
			c.failf("branch to undefined label %q", fx.label)
		}
		cf.code[fx.pc].target = t
	}
	for i := range cf.code {
		if cf.code[i].ctl == cCall {
			cf.calls = append(cf.calls, &cf.code[i])
		}
	}
	cf.template = make([]uint64, int(c.nslots)*warpSize)
	for _, cv := range c.cvals {
		for l := 0; l < warpSize; l++ {
			cf.template[int(cv[0])*warpSize+l] = cv[1]
		}
	}
	if cf.paramSize > 1<<16 {
		c.failf("parameter space of %d bytes is too large", cf.paramSize)
	}
	return cf, nil
}

func (c *fcomp) decl(v *varDecl) {
	switch v.space {
	case "reg":
		if v.vec > 0 {
			panic(&unsupportedError{what: "vector registers"})
		}
		if v.regN > 0 {
			for i := 0; i < v.regN; i++ {
				c.declare(fmt.Sprintf("%s%d", v.name, i), &sym{kind: symReg, slot: c.newSlot(), typ: v.typ})
			}
			c.f.nregs += v.regN
			return
		}
		c.declare(v.name, &sym{kind: symReg, slot: c.newSlot(), typ: v.typ})
		c.f.nregs++
	case "local":
		al := uint32(v.alignment())
		if al == 0 || al&(al-1) != 0 || v.count < 0 || v.size() > maxLocalBytes {
			c.failf("bad local variable %q", v.name)
		}
		c.f.localSize = alignUp32(c.f.localSize, al)
		c.declare(v.name, &sym{kind: symLocal, off: c.f.localSize})
		c.f.localSize += uint32(v.size())
		if c.f.localSize > maxLocalBytes {
			c.failf("local memory of %d bytes is too large", c.f.localSize)
		}
	case "param":
		al := uint32(v.alignment())
		if al == 0 || al&(al-1) != 0 || v.count < 0 || v.size() > 1<<16 {
			c.failf("bad parameter variable %q", v.name)
		}
		off := alignUp32(uint32(c.f.paramSize), al)
		c.declare(v.name, &sym{kind: symParam, off: off, size: uint32(v.size()), typ: v.typ})
		c.f.paramSize = int(off) + int(v.size())
	case "shared":
		key := c.f.name + "\x00" + v.name
		idx, ok := c.m.sharedIndex[key]
		if !ok {
			c.failf("shared variable %q was not laid out", v.name)
		}
		c.declare(v.name, &sym{kind: symShared, idx: idx})
	default:
		c.failf(".%s variables inside a function are not supported", v.space)
	}
}

// initBytes encodes a variable's initializer.
func initBytes(v *varDecl) ([]byte, error) {
	if len(v.init) == 0 {
		return nil, nil
	}
	el := v.typ.size()
	n := uint64(len(v.init)) * uint64(el)
	if sz := v.size(); n > sz && v.count >= 0 {
		return nil, cu.Errorf(cu.ErrorInvalidPTX, "line %d: initializer of %q has %d elements; it holds %d", v.line, v.name, len(v.init), sz/uint64(max(el, 1)))
	}
	out := make([]byte, 0, n)
	for _, o := range v.init {
		if o.kind != oImm && o.kind != oFImm {
			return nil, cu.Errorf(cu.ErrorNotSupported, "line %d: initializer of %q holds an address (%s); address initializers are not supported", v.line, v.name, o.name)
		}
		b := immBits(o, v.typ)
		for i := 0; i < el; i++ {
			out = append(out, byte(b>>(8*i)))
		}
	}
	return out, nil
}

func hasMod(mods []string, m string) bool { return slices.Contains(mods, m) }

// typesOf lists the type modifiers of an instruction in order.
func typesOf(mods []string) []ptype {
	var out []ptype
	for _, m := range mods {
		if t, ok := typeNames[m]; ok {
			out = append(out, t)
		}
	}
	return out
}
