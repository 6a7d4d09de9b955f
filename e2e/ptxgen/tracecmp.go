package ptxgen

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// traceMagic starts a reduced device trace (ReduceTrace's record data).
const traceMagic = "PTXT"

// ReduceTrace turns gpurun's record of an instrumented kernel (every
// thread's whole trace) into a DeviceTrace record: every thread's count
// and digest, and in full the traces and output slots of up to keep
// threads whose traces differ earliest from the emulator's, as long as
// their entries add up to no more than budget (the first is always
// kept). A record of a failed launch is returned as it is.
func ReduceTrace(ctx context.Context, tr *Trace, rec Record, keep, budget int) (Record, error) {
	if rec.Status != 0 {
		return rec, nil
	}
	p := tr.Program
	out, dev, err := tr.ParseTraceRecord(rec.Data)
	if err != nil {
		return Record{}, err
	}
	dt := &DeviceTrace{Seed: p.Seed, Version: p.Version, OutDigest: Digest(out), Acc: out[:accBytes]}
	_, emu, emuErr := tr.RunTrace(ctx)
	type cand struct{ th, at int }
	var cands []cand
	for th, es := range dev {
		switch {
		case emuErr != nil:
			// Nothing to compare with: keep the first threads.
			cands = append(cands, cand{th, 0})
		default:
			if i := firstDiff(es, emu[th]); i >= 0 {
				cands = append(cands, cand{th, i})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].at < cands[j].at })
	kept := map[int]bool{}
	for i, used := 0, 0; i < len(cands) && i < keep; i++ {
		n := len(dev[cands[i].th])
		if i > 0 && used+n > budget {
			break
		}
		used += n
		kept[cands[i].th] = true
	}
	for th, es := range dev {
		t := ThreadTrace{Count: len(es), Digest: traceDigest(es)}
		if kept[th] {
			t.Entries = es
			off := accBytes + th*p.OutStride
			t.Out = out[off : off+p.OutStride]
		}
		dt.Threads = append(dt.Threads, t)
	}
	return Record{Seed: rec.Seed, Status: 0, Data: dt.encode()}, nil
}

func (dt *DeviceTrace) encode() []byte {
	b := []byte(traceMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(dt.Version))
	d, _ := hex.DecodeString(dt.OutDigest)
	b = append(b, d...)
	b = append(b, dt.Acc...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(dt.Threads)))
	for _, t := range dt.Threads {
		b = binary.LittleEndian.AppendUint32(b, uint32(t.Count))
		b = append(b, t.Digest[:]...)
		if t.Entries == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Out)))
		b = append(b, t.Out...)
		for _, e := range t.Entries {
			b = binary.LittleEndian.AppendUint64(b, e)
		}
	}
	return b
}

// DecodeDeviceTrace reads a record written by ReduceTrace.
func DecodeDeviceTrace(rec Record) (*DeviceTrace, error) {
	dt := &DeviceTrace{Seed: rec.Seed}
	if rec.Status != 0 {
		// The error's name, and for a kernel the driver did not compile
		// the start of its log.
		dt.Err = strings.Join(strings.Fields(string(rec.Data[:min(len(rec.Data), 400)])), " ")
		return dt, nil
	}
	b := rec.Data
	bad := func(what string) (*DeviceTrace, error) {
		return nil, fmt.Errorf("device trace of seed %d: %s", rec.Seed, what)
	}
	if len(b) < 4+4+8+accBytes+4 || string(b[:4]) != traceMagic {
		return bad("not a reduced trace (ptxgen tracereduce writes them)")
	}
	dt.Version = int(binary.LittleEndian.Uint32(b[4:]))
	dt.OutDigest = hex.EncodeToString(b[8:16])
	dt.Acc = b[16 : 16+accBytes]
	b = b[16+accBytes:]
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	for th := range n {
		if len(b) < 13 {
			return bad(fmt.Sprintf("ends at thread %d", th))
		}
		t := ThreadTrace{Count: int(binary.LittleEndian.Uint32(b))}
		copy(t.Digest[:], b[4:12])
		kept := b[12] == 1
		b = b[13:]
		if kept {
			if len(b) < 4 {
				return bad(fmt.Sprintf("ends at thread %d", th))
			}
			no := int(binary.LittleEndian.Uint32(b))
			if len(b) < 4+no+8*t.Count {
				return bad(fmt.Sprintf("ends in thread %d's entries", th))
			}
			t.Out = b[4 : 4+no]
			b = b[4+no:]
			t.Entries = make([]uint64, t.Count)
			for i := range t.Entries {
				t.Entries[i] = binary.LittleEndian.Uint64(b[8*i:])
			}
			b = b[8*t.Count:]
		}
		dt.Threads = append(dt.Threads, t)
	}
	if len(b) != 0 {
		return bad(fmt.Sprintf("%d bytes too many", len(b)))
	}
	return dt, nil
}

// TraceDiff is the first entry in which a thread's trace on the emulator
// differs from the device's.
type TraceDiff struct {
	Thread, Index int
	// Point and Result say which instruction wrote the entry and which
	// of its results it is; Point is -1 where the emulator's trace had
	// already ended (the device went on along another path).
	Point, Result int
	Text          string
	Dev, Emu      uint64
	// DevEnd or EmuEnd: that side's trace ended here.
	DevEnd, EmuEnd bool
	// Operands are the values the instruction read from registers (the
	// same on both sides: every earlier entry is), "name=value".
	Operands []string
	// Alone is what the emulator computes for the instruction alone,
	// given those operands, and what that says about the cause.
	Alone string
}

func (d TraceDiff) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "thread %d entry %d: ", d.Thread, d.Index)
	switch {
	case d.Point < 0:
		fmt.Fprintf(&sb, "the emulator's trace ended; the device's goes on with %#x", d.Dev)
		return sb.String()
	case d.DevEnd:
		fmt.Fprintf(&sb, "`%s` (result %d): the device's trace ended here; the emulator wrote %#x", d.Text, d.Result, d.Emu)
	case d.EmuEnd:
		fmt.Fprintf(&sb, "`%s` (result %d): the emulator's trace ended here; the device wrote %#x", d.Text, d.Result, d.Dev)
	default:
		fmt.Fprintf(&sb, "`%s` (result %d): device %#x, emulator %#x", d.Text, d.Result, d.Dev, d.Emu)
	}
	if len(d.Operands) > 0 {
		fmt.Fprintf(&sb, "\n      operands %s", strings.Join(d.Operands, " "))
	}
	if d.Alone != "" {
		fmt.Fprintf(&sb, "\n      %s", d.Alone)
	}
	return sb.String()
}

// TraceReport compares a device's trace of one kernel with the emulator's.
type TraceReport struct {
	Seed uint64
	// Err: the device's launch failed; EmuErr: the emulator's did.
	Err, EmuErr string
	// OutDigest says whether the instrumented kernel's exact outputs
	// are the emulator's.
	OutsMatch bool
	Threads   int
	// Differ counts the threads whose traces differ, Unknown those of
	// them whose entries the device record did not keep.
	Differ, Unknown int
	// Diffs holds the first difference of each kept thread that
	// differs, earliest first.
	Diffs []TraceDiff
}

// Opcode is the opcode of the earliest difference, for grouping reports.
func (r *TraceReport) Opcode() string {
	if len(r.Diffs) == 0 {
		return ""
	}
	if r.Diffs[0].Point < 0 {
		return "(control flow)"
	}
	return opcode(r.Diffs[0].Text)
}

// CompareTrace runs the instrumented kernel of dt's seed on the emulator
// and compares it with the device's trace.
func CompareTrace(ctx context.Context, dt *DeviceTrace) (*TraceReport, error) {
	if err := CheckVersion(dt.Version); err != nil && dt.Err == "" {
		return nil, fmt.Errorf("device trace of seed %d: %w", dt.Seed, err)
	}
	r := &TraceReport{Seed: dt.Seed, Err: dt.Err, Threads: len(dt.Threads)}
	if dt.Err != "" {
		return r, nil
	}
	tr := GenerateWith(dt.Seed, Options{Version: dt.Version}).Trace()
	if len(dt.Threads) != tr.Program.Threads() {
		return nil, fmt.Errorf("device trace of seed %d has %d threads, the kernel %d", dt.Seed, len(dt.Threads), tr.Program.Threads())
	}
	out, emu, err := tr.RunTrace(ctx)
	if err != nil {
		r.EmuErr = err.Error()
		return r, nil
	}
	ids, err := tr.runIDs(ctx)
	if err != nil {
		return nil, fmt.Errorf("seed %d: the labelling run: %w", dt.Seed, err)
	}
	r.OutsMatch = Digest(out) == dt.OutDigest
	for th, t := range dt.Threads {
		if t.Entries == nil {
			if t.Count != len(emu[th]) || t.Digest != traceDigest(emu[th]) {
				r.Differ++
				r.Unknown++
			}
			continue
		}
		i := firstDiff(t.Entries, emu[th])
		if i < 0 {
			continue
		}
		r.Differ++
		r.Diffs = append(r.Diffs, tr.explainEntry(th, i, t.Entries, emu[th], ids[th]))
	}
	sort.SliceStable(r.Diffs, func(i, j int) bool { return r.Diffs[i].Index < r.Diffs[j].Index })
	return r, nil
}

var regToken = regexp.MustCompile(`%(?:rd|fd|[phrf])[0-9]+`)

// explainEntry describes entry i of thread th, the first that differs.
func (tr *Trace) explainEntry(th, i int, dev, emu, ids []uint64) TraceDiff {
	d := TraceDiff{Thread: th, Index: i, Point: -1}
	if i < len(dev) {
		d.Dev = dev[i]
	} else {
		d.DevEnd = true
	}
	if i < len(emu) {
		d.Emu = emu[i]
	} else {
		d.EmuEnd = true
	}
	if i >= len(ids) {
		return d
	}
	d.Point, d.Result = int(ids[i]>>3), int(ids[i]&7)
	pt := tr.Points[d.Point]
	d.Text = pt.Text
	// The registers read: the guard and every register of the source
	// operands, with the value each last received before this
	// instruction (entries before its first result).
	guard, body := "", pt.Text
	if strings.HasPrefix(body, "@") {
		guard, body, _ = strings.Cut(body, " ")
		guard = strings.TrimPrefix(strings.TrimPrefix(guard, "@"), "!")
	}
	op, rest, _ := strings.Cut(body, " ")
	args := splitOperands(rest)
	start := i - d.Result
	valueOf := func(name string) (uint64, bool) {
		for j := start - 1; j >= 0; j-- {
			p, r := int(ids[j]>>3), int(ids[j]&7)
			if tr.Points[p].Dests[r] == name {
				return emu[j], true
			}
		}
		return 0, false
	}
	seen := map[string]bool{}
	var names []string
	if guard != "" {
		names = append(names, guard)
	}
	for _, a := range args[1:] {
		names = append(names, regToken.FindAllString(a, -1)...)
	}
	if len(pt.Dests) == 1 && guard != "" {
		names = append(names, pt.Dests[0]) // a skipped instruction keeps it
	}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		if v, ok := valueOf(n); ok {
			d.Operands = append(d.Operands, fmt.Sprintf("%s=%#x", n, v))
		} else {
			d.Operands = append(d.Operands, n+"=?")
		}
	}
	d.Alone = tr.alone(d, guard, op, args, valueOf)
	return d
}

// alone re-runs a register-only instruction by itself on the emulator
// with the operands it read, which tells an instruction the emulator
// computes differently from one whose inputs differ in a way no register
// shows (memory, other lanes).
func (tr *Trace) alone(d TraceDiff, guard, op string, args []string, valueOf func(string) (uint64, bool)) string {
	if guard != "" {
		g, ok := valueOf(guard)
		if !ok {
			return ""
		}
		neg := strings.HasPrefix(tr.Points[d.Point].Text, "@!")
		if (g != 0) == neg {
			return "its guard is false: the register keeps its value, yet the two sides differ"
		}
	}
	joined := strings.Join(args, ", ")
	switch {
	case strings.ContainsAny(joined, "[{|") || len(tr.Points[d.Point].Dests) != 1:
		return "it reads memory, a vector or writes two results: not re-run alone"
	case strings.HasPrefix(op, "shfl") || strings.HasPrefix(op, "vote") || strings.HasPrefix(op, "match") ||
		strings.HasPrefix(op, "redux") || strings.HasPrefix(op, "elect") || strings.HasPrefix(op, "bar") ||
		strings.Contains(op, "cc") || strings.HasPrefix(op, "addc") || strings.HasPrefix(op, "subc") || strings.HasPrefix(op, "madc"):
		return "it reads other lanes or the condition code: not re-run alone"
	}
	var vals []uint64
	for _, a := range args[1:] {
		if a == "" || a[0] >= 'a' && a[0] <= 'z' || a[0] >= 'A' && a[0] <= 'Z' || a[0] == '_' {
			return "" // a symbol (sbuf, lbuf) the re-run does not declare
		}
		if !strings.HasPrefix(a, "%") {
			continue
		}
		v, ok := valueOf(a)
		if !ok {
			return "" // a special register, or a register no entry wrote
		}
		vals = append(vals, v)
	}
	got, err := runOne(op, args, vals)
	switch {
	case err != nil:
		return fmt.Sprintf("alone on the emulator: %v", err)
	}
	alone := "alone"
	if guard != "" {
		alone = "alone and unguarded"
	}
	switch got {
	case d.Dev:
		return fmt.Sprintf("%s, the emulator gives the device's %#x: the difference comes from around it (what ptxas made of the code)", alone, got)
	case d.Emu:
		return fmt.Sprintf("%s, the emulator gives %#x again: it computes this instruction differently from the device", alone, got)
	}
	return fmt.Sprintf("%s, the emulator gives %#x", alone, got)
}

// splitOperands splits an operand list at the commas outside braces and
// brackets.
func splitOperands(s string) []string {
	var out []string
	for s = strings.TrimSpace(s); s != ""; {
		f := firstOperand(s)
		out = append(out, f)
		s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s[len(f):]), ","))
		if len(f) == 0 {
			break
		}
	}
	return out
}
