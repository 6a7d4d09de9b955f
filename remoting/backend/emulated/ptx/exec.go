package ptx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Generic-address windows. A generic address inside one of these windows
// names shared memory or the executing thread's local memory; every other
// generic address is global. The emulated backend must not hand out device
// addresses inside them.
const (
	SharedWindow uint64 = 0xfe00_0000_0000_0000
	LocalWindow  uint64 = 0xfd00_0000_0000_0000
	ParamWindow  uint64 = 0xfc00_0000_0000_0000 // kernel parameters (cvta.param)
	windowSize   uint64 = 1 << 32
)

const (
	warpSize = 32
	fullMask = ^uint32(0)
	// yieldBudget bounds how many instructions a warp runs before the
	// block's scheduler moves on, so that warps spinning on each other's
	// memory still make progress and cancellation is noticed.
	yieldBudget = 1 << 14
	// maxCallDepth bounds recursion; deeper calls fail the launch the way
	// a stack overflow does on the device.
	maxCallDepth = 256
	// maxLocalBytes bounds a thread's local memory (stack), as the
	// device's 512 KiB does.
	maxLocalBytes = 512 << 10
	// maxBlockLocalBytes bounds the local memory of all threads of a
	// block, so that deep recursion in a large block cannot exhaust the
	// worker's memory.
	maxBlockLocalBytes = 64 << 20
)

type ctlKind uint8

const (
	cNone ctlKind = iota
	cBra
	cExit
	cRet
	cCall
	cBar
)

type execFn func(w *warp, fr *frame, in *inst, m uint32)

// inst is one compiled instruction: operands are pre-resolved to register
// slots (constants live in slots too), so executing it is one indirect call
// over the active lanes.
type inst struct {
	fn       execFn
	ctl      ctlKind
	guard    int32 // predicate slot, -1 when unguarded
	guardNeg bool
	d, a, b  int32
	c, e     int32
	d2       int32 // second destination (predicate), -1 if none
	vec      []int32
	t, t2    ptype
	// dmask is the destination register's width as a mask, for the
	// instructions whose type may be narrower than their destination
	// (ld, cvt, atom): their result is sign- or zero-extended to it.
	dmask  uint64
	off    uint64 // address offset or immediate
	space  uint8
	n      uint8 // vector length / access size
	aux    uint32
	target int32
	call   *callInfo
	src    *instr
	// unsupported says why the instruction cannot run, for one the
	// emulator does not implement ("" otherwise).
	unsupported string
}

type frame struct {
	fn        *cfunc
	regs      []uint64
	pcs       [warpSize]int32
	mask      uint32 // lanes that entered the frame
	done      uint32 // lanes that returned
	localBase uint32
	params    []byte // per-lane parameter area: warpSize × fn.paramSize
	callIn    *inst  // the caller's call instruction
}

type warp struct {
	b        *block
	idx      int
	frames   []*frame
	exited   uint32
	barWait  uint32
	barLane  [warpSize]uint8 // the barrier each waiting lane waits at
	barDst   int32
	barRed   uint8
	barRedOp uint8
	done     bool

	spanBase uint64
	spanData []byte
	local    [warpSize][]byte
	special  [nSpecial][warpSize]uint64
	pool     map[*cfunc][]*frame
	tinsts   uint64 // thread-instructions issued, for statistics
	mask     uint32 // the warp's lanes that are threads of the block
}

type barrier struct {
	arrived  int
	expected int // 0: all live threads of the block
	popc     uint64
	and, or  bool
	active   bool
}

type block struct {
	l        *launch
	shared   []byte
	warps    []*warp
	nthreads int
	exited   int
	bars     [16]barrier
	ctaid    [3]uint32
	// localBytes is the local memory the block's threads hold; it is
	// kept between blocks and launches, which reuse it.
	localBytes int
}

// launch is the state shared by all blocks of one kernel launch.
type launch struct {
	ctx      context.Context
	kernel   *cfunc
	mod      *Module
	mem      Memory
	params   []byte
	grid     [3]uint32
	blk      [3]uint32
	shBytes  uint32 // total shared bytes per block
	dynBytes uint32
	gaddr    []uint64  // bound addresses of module variables
	out      io.Writer // printf output, or nil
	outMu    sync.Mutex
	start    time.Time
	stop     atomic.Bool
	tinsts   atomic.Uint64 // thread-instructions issued by all blocks
}

// fault is raised (as a panic inside the interpreter, recovered at the
// block boundary) when a kernel does something the device would trap on.
type fault struct {
	code cu.Result
	msg  string
	in   *inst
}

func (w *warp) fail(code cu.Result, in *inst, format string, args ...any) {
	panic(&fault{code: code, msg: fmt.Sprintf(format, args...), in: in})
}

// refuseNaN fails a double operation whose operands are NaNs that differ
// (see nan64): which one an H200 returns depends on ptxas's register
// allocation, so no answer would be reliably the device's.
func (w *warp) refuseNaN(in *inst, ops ...uint64) {
	var nans []string
	for _, o := range ops {
		if isNaN64(o) {
			nans = append(nans, fmt.Sprintf("%#x", o))
		}
	}
	w.fail(cu.ErrorNotSupported, in, "NaN operands %s: which NaN the device returns depends on ptxas's register allocation, which the emulator cannot follow", strings.Join(nans, ", "))
}

// global returns n bytes of global memory at addr.
func (w *warp) global(addr uint64, n uint64, in *inst) []byte {
	if off := addr - w.spanBase; off < uint64(len(w.spanData)) && uint64(len(w.spanData))-off >= n {
		return w.spanData[off : off+n]
	}
	base, data, ok := w.b.l.mem.Span(addr)
	if !ok || addr-base > uint64(len(data)) || uint64(len(data))-(addr-base) < n {
		w.fail(cu.ErrorIllegalAddress, in, "%d-byte access at %#x is outside every allocation", n, addr)
	}
	w.spanBase, w.spanData = base, data
	off := addr - base
	return data[off : off+n]
}

func (w *warp) sharedAt(addr uint64, n uint64, in *inst) []byte {
	sh := w.b.shared
	if addr > uint64(len(sh)) || uint64(len(sh))-addr < n {
		w.fail(cu.ErrorIllegalAddress, in, "%d-byte shared access at offset %#x is outside the block's %d bytes of shared memory", n, addr, len(sh))
	}
	return sh[addr : addr+n]
}

func (w *warp) localAt(lane int, addr uint64, n uint64, in *inst) []byte {
	lm := w.local[lane]
	if addr > uint64(len(lm)) || uint64(len(lm))-addr < n {
		w.fail(cu.ErrorIllegalAddress, in, "%d-byte local access at offset %#x is outside the thread's %d bytes of local memory", n, addr, len(lm))
	}
	return lm[addr : addr+n]
}

// generic resolves a generic address through the shared and local windows.
func (w *warp) generic(lane int, addr uint64, n uint64, in *inst) []byte {
	switch addr &^ (windowSize - 1) {
	case SharedWindow:
		return w.sharedAt(addr-SharedWindow, n, in)
	case LocalWindow:
		return w.localAt(lane, addr-LocalWindow, n, in)
	case ParamWindow:
		p := w.b.l.params
		off := addr - ParamWindow
		if off > uint64(len(p)) || uint64(len(p))-off < n {
			w.fail(cu.ErrorIllegalAddress, in, "%d-byte parameter access at offset %d is outside the %d-byte parameter buffer", n, off, len(p))
		}
		return p[off : off+n]
	}
	return w.global(addr, n, in)
}

// mem returns the bytes an access in space touches.
func (w *warp) mem(space uint8, lane int, addr uint64, n uint64, in *inst) []byte {
	switch space {
	case spGlobal, spConst:
		return w.global(addr, n, in)
	case spShared:
		return w.sharedAt(addr, n, in)
	case spLocal:
		return w.localAt(lane, addr, n, in)
	}
	return w.generic(lane, addr, n, in)
}

// guardMask evaluates an instruction's predicate over the lanes in m.
func guardMask(regs []uint64, in *inst, m uint32) uint32 {
	base := int(in.guard) * warpSize
	var out uint32
	for mm := m; mm != 0; mm &= mm - 1 {
		l := bits.TrailingZeros32(mm)
		if (regs[base+l] != 0) != in.guardNeg {
			out |= 1 << l
		}
	}
	return out
}

// run executes the warp until it finishes, blocks at a barrier, or spends
// its budget. Scheduling inside the warp follows the lowest program
// counter among its runnable lanes, which reconverges structured control
// flow (if/else, loops, early exits) at its join point.
func (w *warp) run(budget int) (progressed bool) {
	start := budget
	defer func() { progressed = progressed || budget != start }()
	for budget > 0 {
		if len(w.frames) == 0 {
			w.done = true
			return true
		}
		fr := w.frames[len(w.frames)-1]
		live := fr.mask &^ fr.done &^ w.exited
		runnable := live &^ w.barWait
		if runnable == 0 {
			if live == 0 {
				w.popFrame()
				progressed = true
				continue
			}
			return progressed
		}
		minPC := int32(math.MaxInt32)
		for mm := runnable; mm != 0; mm &= mm - 1 {
			if p := fr.pcs[bits.TrailingZeros32(mm)]; p < minPC {
				minPC = p
			}
		}
		var cur uint32
		otherMin := int32(math.MaxInt32)
		for mm := runnable; mm != 0; mm &= mm - 1 {
			l := bits.TrailingZeros32(mm)
			if p := fr.pcs[l]; p == minPC {
				cur |= 1 << l
			} else if p < otherMin {
				otherMin = p
			}
		}
		pc := minPC
		code := fr.fn.code
		regs := fr.regs
	loop:
		for pc < otherMin && budget > 0 {
			budget--
			w.tinsts += uint64(bits.OnesCount32(cur))
			in := &code[pc]
			em := cur
			if in.guard >= 0 {
				em = guardMask(regs, in, cur)
			}
			switch in.ctl {
			case cNone:
				if em != 0 {
					in.fn(w, fr, in, em)
				}
				pc++
			case cBra:
				switch em {
				case cur:
					pc = in.target
				case 0:
					pc++
				default:
					for mm := cur; mm != 0; mm &= mm - 1 {
						l := bits.TrailingZeros32(mm)
						if em&(1<<l) != 0 {
							fr.pcs[l] = in.target
						} else {
							fr.pcs[l] = pc + 1
						}
					}
					cur = 0
					break loop
				}
			case cExit:
				w.exited |= em
				w.b.exited += bits.OnesCount32(em)
				cur &^= em
				pc++
				if cur == 0 {
					break loop
				}
			case cRet:
				fr.done |= em
				if len(w.frames) == 1 {
					// Returning from the kernel ends the thread: it no
					// longer counts at barriers.
					w.exited |= em
					w.b.exited += bits.OnesCount32(em)
				}
				cur &^= em
				pc++
				if cur == 0 {
					break loop
				}
			case cBar:
				if em == 0 {
					pc++
					continue
				}
				if !w.arrive(fr, in, em) {
					// bar.arrive: counted, no wait
					pc++
					continue
				}
				pc++
				for mm := em; mm != 0; mm &= mm - 1 {
					fr.pcs[bits.TrailingZeros32(mm)] = pc
				}
				cur &^= em
				if cur == 0 {
					break loop
				}
			case cCall:
				pc++
				for mm := cur; mm != 0; mm &= mm - 1 {
					fr.pcs[bits.TrailingZeros32(mm)] = pc
				}
				cur = 0
				if em != 0 {
					w.call(fr, in, em)
				}
				break loop
			}
		}
		for mm := cur; mm != 0; mm &= mm - 1 {
			fr.pcs[bits.TrailingZeros32(mm)] = pc
		}
	}
	return progressed
}

// arrive records lanes em at the barrier of in. It reports whether they
// must wait (bar.sync, bar.red) rather than continue (bar.arrive).
func (w *warp) arrive(fr *frame, in *inst, em uint32) bool {
	b := w.b
	id := int(in.aux & 0xff)
	if in.a >= 0 {
		id = int(fr.regs[int(in.a)*warpSize+bits.TrailingZeros32(em)])
	}
	if id < 0 || id >= len(b.bars) {
		w.fail(cu.ErrorIllegalInstruction, in, "barrier %d does not exist (0..15)", id)
	}
	bar := &b.bars[id]
	expected := 0
	if in.b >= 0 {
		expected = int(uint32(fr.regs[int(in.b)*warpSize+bits.TrailingZeros32(em)]))
		if expected <= 0 || expected > b.nthreads {
			w.fail(cu.ErrorIllegalInstruction, in, "barrier %d expects %d threads; the block has %d", id, expected, b.nthreads)
		}
	}
	if !bar.active {
		bar.active = true
		bar.expected = expected
		bar.and = true
		bar.or = false
		bar.popc = 0
	}
	n := bits.OnesCount32(em)
	bar.arrived += n
	wait := in.aux&barWaits != 0
	if in.aux&barReduces != 0 {
		for mm := em; mm != 0; mm &= mm - 1 {
			l := bits.TrailingZeros32(mm)
			v := fr.regs[int(in.c)*warpSize+l] != 0
			if v {
				bar.popc++
				bar.or = true
			} else {
				bar.and = false
			}
		}
		w.barDst = in.d
		w.barRedOp = uint8(in.aux >> 8)
		w.barRed = 1
	} else {
		w.barRed = 0
	}
	if wait {
		w.barWait |= em
		for mm := em; mm != 0; mm &= mm - 1 {
			w.barLane[bits.TrailingZeros32(mm)] = uint8(id)
		}
	}
	return wait
}

func (w *warp) call(caller *frame, in *inst, em uint32) {
	ci := in.call
	if ci.builtin != nil {
		ci.builtin(w, caller, in, em)
		return
	}
	callee := ci.callee
	if callee == nil {
		w.fail(cu.ErrorNotSupported, in, "call to %s, which has no body in this module (device-side library calls are not emulated)", ci.name)
	}
	if len(w.frames) >= maxCallDepth {
		w.fail(cu.ErrorLaunchFailed, in, "stack overflow: call depth exceeds %d (runaway recursion?)", maxCallDepth)
	}
	fr := w.newFrame(callee, em, caller.localBase+alignUp32(caller.fn.localSize, 16))
	fr.callIn = in
	ps := uint32(callee.paramSize)
	cs := uint32(caller.fn.paramSize)
	for i, a := range ci.args {
		dst := callee.paramOffs[i]
		for mm := em; mm != 0; mm &= mm - 1 {
			l := uint32(bits.TrailingZeros32(mm))
			copy(fr.params[l*ps+dst.Offset:l*ps+dst.Offset+dst.Size], caller.params[l*cs+a.Offset:l*cs+a.Offset+min(a.Size, dst.Size)])
		}
	}
	w.frames = append(w.frames, fr)
}

func (w *warp) popFrame() {
	fr := w.frames[len(w.frames)-1]
	w.frames = w.frames[:len(w.frames)-1]
	if len(w.frames) > 0 && fr.callIn != nil {
		caller := w.frames[len(w.frames)-1]
		ci := fr.callIn.call
		ps := uint32(fr.fn.paramSize)
		cs := uint32(caller.fn.paramSize)
		for i, r := range ci.rets {
			src := fr.fn.retOffs[i]
			for mm := fr.mask &^ w.exited; mm != 0; mm &= mm - 1 {
				l := uint32(bits.TrailingZeros32(mm))
				copy(caller.params[l*cs+r.Offset:l*cs+r.Offset+min(r.Size, src.Size)], fr.params[l*ps+src.Offset:l*ps+src.Offset+src.Size])
			}
		}
	}
	w.pool[fr.fn] = append(w.pool[fr.fn], fr)
}

// newFrame sets up an activation of fn for lanes m.
func (w *warp) newFrame(fn *cfunc, m uint32, localBase uint32) *frame {
	var fr *frame
	if p := w.pool[fn]; len(p) > 0 {
		fr = p[len(p)-1]
		w.pool[fn] = p[:len(p)-1]
	} else {
		fr = &frame{fn: fn, regs: make([]uint64, len(fn.template)), params: make([]byte, warpSize*fn.paramSize)}
	}
	copy(fr.regs, fn.template)
	clear(fr.params)
	fr.mask, fr.done, fr.localBase, fr.callIn = m, 0, localBase, nil
	fr.pcs = [warpSize]int32{}
	for _, f := range fn.fills {
		dst := fr.regs[int(f.slot)*warpSize : int(f.slot)*warpSize+warpSize]
		switch f.kind {
		case fillSpecial:
			copy(dst, w.special[f.idx][:])
		case fillGlobal:
			v := w.b.l.gaddr[f.idx]
			for i := range dst {
				dst[i] = v
			}
		case fillLocal:
			v := uint64(localBase) + uint64(f.idx)
			for i := range dst {
				dst[i] = v
			}
		case fillShared:
			v := uint64(w.b.l.kernel.sharedOff[f.idx])
			for i := range dst {
				dst[i] = v
			}
		}
	}
	if fn.localSize > 0 {
		need := int(localBase) + int(alignUp32(fn.localSize, 16))
		if need > maxLocalBytes {
			w.fail(cu.ErrorLaunchFailed, nil, "stack overflow: a thread needs more than %d bytes of local memory", maxLocalBytes)
		}
		for l := 0; l < warpSize; l++ {
			if m&(1<<l) == 0 {
				continue
			}
			if len(w.local[l]) < need {
				grow := need - len(w.local[l])
				if w.b.localBytes+grow > maxBlockLocalBytes {
					w.fail(cu.ErrorLaunchFailed, nil, "stack overflow: the block's threads need more than %d MiB of local memory", maxBlockLocalBytes>>20)
				}
				w.b.localBytes += grow
				nl := make([]byte, need)
				copy(nl, w.local[l])
				w.local[l] = nl
			}
			clear(w.local[l][localBase:need])
		}
	}
	return fr
}

func alignUp32(x, a uint32) uint32 { return (x + a - 1) &^ (a - 1) }

// runBlock executes one thread block to completion.
func (b *block) run() {
	l := b.l
	for {
		ran := false
		allDone := true
		for _, w := range b.warps {
			if w.done {
				continue
			}
			allDone = false
			if w.run(yieldBudget) {
				ran = true
			}
			b.releaseBarriers()
		}
		if allDone {
			return
		}
		if !ran && !b.releaseBarriers() {
			b.deadlock()
		}
		// Every round: a round is at most yieldBudget instructions per
		// warp, so cancellation is noticed within milliseconds.
		if l.stop.Load() || l.ctx.Err() != nil {
			panic(errStopped)
		}
	}
}

// errStopped unwinds a block when the launch is stopping; safeRunBlock
// turns it into errInterrupted, which execute does not report.
var (
	errStopped     = &fault{code: cu.ErrorLaunchFailed, msg: "launch stopped"}
	errInterrupted = errors.New("block interrupted")
)

// releaseBarriers completes every barrier whose expected arrivals are in.
func (b *block) releaseBarriers() bool {
	released := false
	for id := range b.bars {
		bar := &b.bars[id]
		if !bar.active {
			continue
		}
		want := bar.expected
		if want == 0 {
			want = b.nthreads - b.exited
		}
		if bar.arrived < want {
			continue
		}
		for _, w := range b.warps {
			var lanes uint32
			for mm := w.barWait; mm != 0; mm &= mm - 1 {
				if l := bits.TrailingZeros32(mm); int(w.barLane[l]) == id {
					lanes |= 1 << l
				}
			}
			if lanes == 0 {
				continue
			}
			if w.barRed != 0 && len(w.frames) > 0 {
				fr := w.frames[len(w.frames)-1]
				var v uint64
				switch w.barRedOp {
				case redPopc:
					v = bar.popc
				case redAnd:
					v = b2u(bar.and)
				case redOr:
					v = b2u(bar.or)
				}
				for mm := lanes; mm != 0; mm &= mm - 1 {
					fr.regs[int(w.barDst)*warpSize+bits.TrailingZeros32(mm)] = v
				}
			}
			w.barWait &^= lanes
			if w.barWait == 0 {
				w.barRed = 0
			}
		}
		*bar = barrier{}
		released = true
	}
	return released
}

func (b *block) deadlock() {
	for id, bar := range b.bars {
		if bar.active {
			want := bar.expected
			if want == 0 {
				want = b.nthreads - b.exited
			}
			panic(&fault{code: cu.ErrorLaunchFailed, msg: fmt.Sprintf(
				"deadlock: barrier %d has %d of %d threads; the rest exited or wait elsewhere", id, bar.arrived, want)})
		}
	}
	panic(&fault{code: cu.ErrorLaunchFailed, msg: "deadlock: no thread can make progress"})
}

// worker runs blocks of one launch; it keeps its block and warp state
// between blocks to avoid re-allocating.
type worker struct {
	l   *launch
	blk *block
	nsm uint64 // %nsmid
}

func newWorker(l *launch) *worker {
	nthreads := int(l.blk[0] * l.blk[1] * l.blk[2])
	nw := (nthreads + warpSize - 1) / warpSize
	b := &block{l: l, shared: make([]byte, l.shBytes), nthreads: nthreads}
	for i := 0; i < nw; i++ {
		b.warps = append(b.warps, &warp{b: b, idx: i, pool: map[*cfunc][]*frame{}})
	}
	wk := &worker{blk: b}
	wk.attach(l)
	return wk
}

// attach prepares the worker for launch l: the special registers that are
// the same in every block are set here, once per launch.
func (wk *worker) attach(l *launch) {
	wk.l = l
	b := wk.blk
	b.l = l
	// %nsmid is the host's CPU count, the multiprocessor count the
	// emulated device reports; %smid spreads blocks over them.
	wk.nsm = uint64(runtime.NumCPU())
	bx, by := uint32(l.blk[0]), uint32(l.blk[1])
	for wi, w := range b.warps {
		w.mask = 0
		s := &w.special
		for lane := 0; lane < warpSize; lane++ {
			t := uint32(wi*warpSize + lane)
			if int(t) < b.nthreads {
				w.mask |= 1 << lane
			}
			s[spTidX][lane] = uint64(t % bx)
			s[spTidY][lane] = uint64(t / bx % by)
			s[spTidZ][lane] = uint64(t / (bx * by))
			s[spNtidX][lane], s[spNtidY][lane], s[spNtidZ][lane] = uint64(l.blk[0]), uint64(l.blk[1]), uint64(l.blk[2])
			s[spNctaidX][lane], s[spNctaidY][lane], s[spNctaidZ][lane] = uint64(l.grid[0]), uint64(l.grid[1]), uint64(l.grid[2])
			s[spLaneid][lane] = uint64(lane)
			s[spWarpid][lane] = uint64(wi)
			s[spNwarpid][lane] = uint64(len(b.warps))
			s[spNsmid][lane] = wk.nsm
			s[spGridid][lane] = 1
			s[spLanemaskEq][lane] = 1 << lane
			s[spLanemaskLt][lane] = 1<<lane - 1
			s[spLanemaskLe][lane] = 1<<(lane+1) - 1
			s[spLanemaskGe][lane] = uint64(^uint32(0) << lane)
			s[spLanemaskGt][lane] = uint64(^uint32(0) << lane << 1)
			s[spDynSmem][lane] = uint64(l.dynBytes)
			s[spTotalSmem][lane] = uint64(l.shBytes)
			s[spClusterCtarank][lane] = 0
			s[spClusterNctarank][lane] = 1
		}
	}
}

// special register indexes
const (
	spTidX = iota
	spTidY
	spTidZ
	spNtidX
	spNtidY
	spNtidZ
	spCtaidX
	spCtaidY
	spCtaidZ
	spNctaidX
	spNctaidY
	spNctaidZ
	spLaneid
	spWarpid
	spNwarpid
	spSmid
	spNsmid
	spGridid
	spLanemaskEq
	spLanemaskLe
	spLanemaskLt
	spLanemaskGe
	spLanemaskGt
	spDynSmem
	spTotalSmem
	spClusterCtarank
	spClusterNctarank
	nSpecial
)

var specialNames = map[string]int{
	"%tid.x": spTidX, "%tid.y": spTidY, "%tid.z": spTidZ,
	"%ntid.x": spNtidX, "%ntid.y": spNtidY, "%ntid.z": spNtidZ,
	"%ctaid.x": spCtaidX, "%ctaid.y": spCtaidY, "%ctaid.z": spCtaidZ,
	"%nctaid.x": spNctaidX, "%nctaid.y": spNctaidY, "%nctaid.z": spNctaidZ,
	"%laneid": spLaneid, "%warpid": spWarpid, "%nwarpid": spNwarpid,
	"%smid": spSmid, "%nsmid": spNsmid, "%gridid": spGridid,
	"%lanemask_eq": spLanemaskEq, "%lanemask_le": spLanemaskLe, "%lanemask_lt": spLanemaskLt,
	"%lanemask_ge": spLanemaskGe, "%lanemask_gt": spLanemaskGt,
	"%dynamic_smem_size": spDynSmem, "%total_smem_size": spTotalSmem,
	"%cluster_ctarank": spClusterCtarank, "%cluster_nctarank": spClusterNctarank,
	// Without clusters every block is its own cluster of one.
	"%ctaid": spCtaidX,
}

func (wk *worker) runBlock(bid uint64) {
	l := wk.l
	b := wk.blk
	gx, gy := uint64(l.grid[0]), uint64(l.grid[1])
	b.ctaid = [3]uint32{uint32(bid % gx), uint32(bid / gx % gy), uint32(bid / (gx * gy))}
	b.exited = 0
	b.bars = [16]barrier{}
	clear(b.shared)
	smid := bid % wk.nsm
	for _, w := range b.warps {
		w.done, w.exited, w.barWait, w.barRed = false, 0, 0, 0
		w.spanData = nil
		w.spanBase = 0
		// Only the block's own special registers change between blocks.
		s := &w.special
		for lane := range warpSize {
			s[spCtaidX][lane], s[spCtaidY][lane], s[spCtaidZ][lane] = uint64(b.ctaid[0]), uint64(b.ctaid[1]), uint64(b.ctaid[2])
			s[spSmid][lane] = smid
		}
		for len(w.frames) > 0 {
			w.popFrameQuiet()
		}
		w.frames = append(w.frames, w.newFrame(l.kernel, w.mask, 0))
	}
	b.run()
	var n uint64
	for _, w := range b.warps {
		n += w.tinsts
		w.tinsts = 0
	}
	l.tinsts.Add(n)
}

// popFrameQuiet drops a frame left over from a failed block.
func (w *warp) popFrameQuiet() {
	fr := w.frames[len(w.frames)-1]
	w.frames = w.frames[:len(w.frames)-1]
	w.pool[fr.fn] = append(w.pool[fr.fn], fr)
}

// execute runs all blocks of l on up to workers goroutines, reusing
// worker state from pool when the block shape matches.
func execute(l *launch, workers int, pool *sync.Pool) error {
	nblocks := uint64(l.grid[0]) * uint64(l.grid[1]) * uint64(l.grid[2])
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if uint64(workers) > nblocks {
		workers = int(nblocks)
	}
	getWorker := func() *worker {
		if v, ok := pool.Get().(*worker); ok && v.fits(l) {
			v.attach(l)
			return v
		}
		return newWorker(l)
	}
	var next atomic.Uint64
	var mu sync.Mutex
	var firstErr error
	var firstBlock uint64 = math.MaxUint64
	work := func() {
		wk := getWorker()
		defer pool.Put(wk)
		for !l.stop.Load() {
			bid := next.Add(1) - 1
			if bid >= nblocks {
				return
			}
			if l.ctx.Err() != nil {
				l.stop.Store(true)
				return
			}
			if err := wk.safeRunBlock(bid); err != nil {
				if err == errInterrupted {
					// Stopped because another block failed or the
					// context ended; that is reported instead.
					l.stop.Store(true)
					return
				}
				mu.Lock()
				if bid < firstBlock {
					firstErr, firstBlock = err, bid
				}
				mu.Unlock()
				l.stop.Store(true)
				return
			}
		}
	}
	if workers == 1 {
		work()
	} else {
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work()
			}()
		}
		wg.Wait()
	}
	if firstErr == nil {
		if cerr := l.ctx.Err(); cerr != nil && l.stop.Load() {
			return canceled(l.kernel.name, cerr)
		}
	}
	return firstErr
}

// canceledError is a launch stopped by its context. It is a *cu.Error
// (CUDA_ERROR_LAUNCH_FAILED) for errors.As and matches the context's error
// for errors.Is, so a caller can tell shutdown from a faulting kernel.
type canceledError struct {
	ce    *cu.Error
	cause error
}

func (e *canceledError) Error() string   { return e.ce.Error() }
func (e *canceledError) Unwrap() []error { return []error{e.ce, e.cause} }

func canceled(kernel string, cause error) error {
	return &canceledError{ce: &cu.Error{Code: cu.ErrorLaunchFailed, Detail: fmt.Sprintf("kernel %s: %v", kernel, cause)}, cause: cause}
}

// fits reports whether the worker's block state has l's shape.
func (wk *worker) fits(l *launch) bool {
	return wk.blk.nthreads == int(l.blk[0]*l.blk[1]*l.blk[2]) && len(wk.blk.shared) == int(l.shBytes)
}

// safeRunBlock converts faults, and as a last resort any Go panic, into a
// CUDA error: a kernel must never take the process down.
func (wk *worker) safeRunBlock(bid uint64) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		l := wk.l
		if r == errStopped {
			err = errInterrupted
			return
		}
		f, ok := r.(*fault)
		if !ok {
			err = cu.Errorf(cu.ErrorLaunchFailed, "kernel %s: emulator fault: %v\n%s", l.kernel.name, r, debug.Stack())
			return
		}
		where := ""
		if f.in != nil && f.in.src != nil {
			where = fmt.Sprintf(" at line %d `%s`", f.in.src.line, f.in.src.text)
		}
		c := wk.blk.ctaid
		err = cu.Errorf(f.code, "kernel %s, block (%d,%d,%d)%s: %s", l.kernel.name, c[0], c[1], c[2], where, f.msg)
	}()
	wk.runBlock(bid)
	return nil
}

func timeNow() time.Time { return time.Now() }
