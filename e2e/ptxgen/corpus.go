package ptxgen

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Entry is one kernel of a corpus as the device ran it.
type Entry struct {
	Seed uint64
	// Hash is the digest of the exact-output buffer (Digest), or empty
	// when the launch failed.
	Hash string
	// Err is the CUDA error the device reported, or empty.
	Err string
	// Approx is the device's approximate-output buffer.
	Approx []byte
}

// Corpus is a device's record of generated kernels. On disk it is a text
// file, one line per kernel ("SEED HASH" or "SEED error NAME"), and a
// binary file beside it with the approximate outputs of the kernels that
// have any, in the text file's order.
type Corpus struct {
	Version int
	Note    string // the device, driver and compiler
	Entries []Entry
}

// Digest is the hash a corpus records for an exact-output buffer.
func Digest(out []byte) string {
	h := sha256.Sum256(out)
	return hex.EncodeToString(h[:8])
}

// WriteCorpus writes c to path (text) and path's .approx sibling.
func WriteCorpus(c *Corpus, path string) error {
	var tb strings.Builder
	var ab []byte
	fmt.Fprintf(&tb, "# Generated PTX kernels (e2e/ptxgen) as a real device ran them; see e2e/ptxgen/README.md.\n")
	fmt.Fprintf(&tb, "version %d\n", c.Version)
	fmt.Fprintf(&tb, "note %s\n", c.Note)
	for _, e := range c.Entries {
		if e.Err != "" {
			fmt.Fprintf(&tb, "%d error %s\n", e.Seed, e.Err)
			continue
		}
		fmt.Fprintf(&tb, "%d %s\n", e.Seed, e.Hash)
		ab = append(ab, e.Approx...)
	}
	if err := os.WriteFile(path, []byte(tb.String()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(approxPath(path), ab, 0o644)
}

func approxPath(path string) string { return strings.TrimSuffix(path, ".txt") + ".approx" }

// ReadCorpus reads a corpus written by WriteCorpus. The approximate
// outputs are cut from the binary file by each program's ApproxLen, so
// the generator must still make the corpus's version (MinVersion to
// Version).
func ReadCorpus(path string) (*Corpus, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := &Corpus{}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		fields := strings.Fields(t)
		switch fields[0] {
		case "version":
			if len(fields) != 2 {
				return nil, fmt.Errorf("corpus %s line %d: want `version N`", path, line)
			}
			c.Version, err = strconv.Atoi(fields[1])
			if err != nil {
				return nil, fmt.Errorf("corpus %s line %d: %v", path, line, err)
			}
			continue
		case "note":
			c.Note = strings.TrimSpace(strings.TrimPrefix(t, "note"))
			continue
		}
		seed, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil || len(fields) < 2 {
			return nil, fmt.Errorf("corpus %s line %d: want `SEED HASH` or `SEED error NAME`", path, line)
		}
		e := Entry{Seed: seed}
		if fields[1] == "error" {
			if len(fields) != 3 {
				return nil, fmt.Errorf("corpus %s line %d: want `SEED error NAME`", path, line)
			}
			e.Err = fields[2]
		} else {
			e.Hash = fields[1]
		}
		c.Entries = append(c.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := CheckVersion(c.Version); err != nil {
		return nil, fmt.Errorf("corpus %s: %w: record it again on a GPU (e2e/ptxgen/gpu-record.sh)", path, err)
	}
	ab, err := os.ReadFile(approxPath(path))
	if err != nil {
		return nil, err
	}
	for i := range c.Entries {
		e := &c.Entries[i]
		if e.Err != "" {
			continue
		}
		n := GenerateWith(e.Seed, Options{Version: c.Version}).ApproxLen
		if len(ab) < n {
			return nil, fmt.Errorf("corpus %s: %s ends early, at seed %d", path, approxPath(path), e.Seed)
		}
		e.Approx, ab = ab[:n], ab[n:]
	}
	if len(ab) != 0 {
		return nil, fmt.Errorf("corpus %s: %s has %d bytes too many", path, approxPath(path), len(ab))
	}
	return c, nil
}

// Outcome classifies one kernel's replay.
type Outcome int

const (
	Exact        Outcome = iota // the exact outputs are identical, approximations within bounds
	SameError                   // both failed with the same error
	Refused                     // the emulator refused an instruction with CUDA_ERROR_NOT_SUPPORTED
	Mismatch                    // different exact outputs
	ApproxBound                 // an approximation outside its bound
	ErrorDiffers                // one failed, or both with different errors
)

var outcomeNames = []string{"exact", "same error", "refused", "MISMATCH", "APPROXIMATION OUT OF BOUNDS", "ERROR DIFFERS"}

func (o Outcome) String() string { return outcomeNames[o] }

// Failed reports whether the outcome is a wrong answer.
func (o Outcome) Failed() bool { return o >= Mismatch }

// Result is the replay of one entry.
type Result struct {
	Seed    uint64
	Outcome Outcome
	Detail  string
	// Approx counts the approximate outputs compared.
	Approx int
}

// Check runs the program of e (generator version v) on the emulator and
// compares it with the device's record.
func Check(ctx context.Context, v int, e Entry, workers int) Result {
	p := GenerateWith(e.Seed, Options{Version: v})
	out, ap, err := RunEmulator(ctx, p, workers)
	res := Result{Seed: e.Seed}
	var ce *cu.Error
	switch {
	case err != nil && errors.As(err, &ce) && ce.Code == cu.ErrorNotSupported:
		res.Outcome, res.Detail = Refused, err.Error()
	case err != nil:
		name := errName(err)
		if name == e.Err {
			res.Outcome = SameError
		} else {
			res.Outcome, res.Detail = ErrorDiffers, fmt.Sprintf("emulator: %v; device: %s", err, orOK(e.Err))
		}
	case e.Err != "":
		res.Outcome, res.Detail = ErrorDiffers, fmt.Sprintf("emulator: success; device: %s", e.Err)
	case Digest(out) != e.Hash:
		res.Outcome, res.Detail = Mismatch, "exact outputs differ"
	default:
		res.Approx = len(p.Approx) * approxLanes
		if d := CompareApprox(p, out, ap, e.Approx); d != "" {
			res.Outcome, res.Detail = ApproxBound, d
		}
	}
	return res
}

func orOK(s string) string {
	if s == "" {
		return "success"
	}
	return s
}

// errName is the CUDA error name of err ("CUDA_ERROR_ILLEGAL_ADDRESS").
func errName(err error) string {
	var ce *cu.Error
	if errors.As(err, &ce) {
		return ce.Code.Name()
	}
	return "CUDA_ERROR_UNKNOWN"
}

// Replay checks every entry of c on up to parallel goroutines (one
// emulator worker each) and returns the results in corpus order.
func Replay(ctx context.Context, c *Corpus, parallel int) []Result {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	res := make([]Result, len(c.Entries))
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res[i] = Check(ctx, c.Version, c.Entries[i], 1)
			}
		}()
	}
	for i := range c.Entries {
		next <- i
	}
	close(next)
	wg.Wait()
	return res
}

// Summary counts results by outcome, for a report.
func Summary(rs []Result) string {
	counts := make([]int, len(outcomeNames))
	approx := 0
	for _, r := range rs {
		counts[r.Outcome]++
		approx += r.Approx
	}
	var parts []string
	for o, n := range counts {
		if n > 0 || Outcome(o) == Exact {
			parts = append(parts, fmt.Sprintf("%d %s", n, Outcome(o)))
		}
	}
	return fmt.Sprintf("%d kernels: %s; %d approximate outputs within the ISA's bounds", len(rs), strings.Join(parts, ", "), approx)
}

// slotValue reads slot s of thread t from an exact-output buffer.
func (p *Program) slotValue(out []byte, t, s int) uint64 {
	sl := p.Slots[s]
	off := accBytes + t*p.OutStride + sl.Off
	var v uint64
	for i := sl.Size - 1; i >= 0; i-- {
		v = v<<8 | uint64(out[off+i])
	}
	return v
}

// CompareApprox holds the emulator's approximate outputs (emu) to the
// device's (dev): each within the error bound the PTX ISA gives its
// instruction, special values (NaN, infinities, zeros) identical. It
// returns "" or a description of the first violation.
func CompareApprox(p *Program, out, emu, dev []byte) string {
	if len(emu) != len(dev) {
		return fmt.Sprintf("approximate outputs are %d bytes, the device's %d", len(emu), len(dev))
	}
	for t := 0; t < approxLanes && t < p.Threads(); t++ {
		for _, a := range p.Approx {
			off := t*p.ApproxStride + a.Off
			e := leBytes(emu[off : off+a.Size])
			d := leBytes(dev[off : off+a.Size])
			in := p.slotValue(out, t, a.Input)
			if ok, why := approxWithin(a.Op, a.Size, in, e, d); !ok {
				return fmt.Sprintf("thread %d `%s` of %#x: emulator %#x, device %#x: %s", t, a.Op, in, e, d, why)
			}
		}
	}
	return ""
}

func leBytes(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// approxWithin compares two results of an approximate instruction. The
// bounds are the ISA's for each instruction, widened by the emulator's own
// rounding (it returns the correctly rounded exact value) and kept for
// the inputs the generator gives them (|x| < 8, or 1/16 <= x < 16).
func approxWithin(op string, size int, in, emu, dev uint64) (bool, string) {
	var e, d float64
	switch size {
	case 2:
		e, d = float64(f16(uint16(emu))), float64(f16(uint16(dev)))
	case 4:
		e, d = float64(math.Float32frombits(uint32(emu))), float64(math.Float32frombits(uint32(dev)))
	default:
		e, d = math.Float64frombits(emu), math.Float64frombits(dev)
	}
	switch {
	case e != e || d != d:
		return e != e && d != d, "NaN on one side only"
	case math.IsInf(e, 0) || math.IsInf(d, 0) || e == 0 || d == 0:
		return e == d, "special values differ"
	}
	rel, abs := 0.0, 0.0
	base := op[:strings.LastIndex(op, ".")]
	base = strings.TrimSuffix(base, ".ftz")
	switch {
	case size == 2:
		rel = 0x1p-8
	case size == 8:
		rel = 0x1p-18
	case strings.HasPrefix(base, "sin") || strings.HasPrefix(base, "cos"):
		abs = 0x1p-18
	case strings.HasPrefix(base, "tanh"):
		rel, abs = 0x1p-10, 0x1p-24
	case strings.HasPrefix(base, "lg2"):
		rel, abs = 0x1p-20, 0x1p-20
	case strings.HasPrefix(base, "div"):
		rel = 0x1p-20
	default: // ex2, rsqrt, rcp, sqrt
		rel = 0x1p-20
	}
	if diff := math.Abs(e - d); diff > abs+rel*math.Abs(e) {
		return false, fmt.Sprintf("differ by %g, more than %g absolute + %g relative", diff, abs, rel)
	}
	return true, ""
}

// f16 decodes an IEEE half.
func f16(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		f := float32(man) * 0x1p-24
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}

// ReadResults reads the records gpurun writes.
func ReadResults(r io.Reader) (map[uint64]Record, error) {
	out := map[uint64]Record{}
	br := bufio.NewReader(r)
	for {
		var hdr [16]byte
		if _, err := io.ReadFull(br, hdr[:]); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("gpurun results: %w", err)
		}
		rec := Record{Seed: binary.LittleEndian.Uint64(hdr[:]), Status: binary.LittleEndian.Uint32(hdr[8:])}
		n := binary.LittleEndian.Uint32(hdr[12:])
		rec.Data = make([]byte, n)
		if _, err := io.ReadFull(br, rec.Data); err != nil {
			return nil, fmt.Errorf("gpurun results, seed %d: %w", rec.Seed, err)
		}
		out[rec.Seed] = rec
	}
}

// Record is what gpurun reports for one kernel: status 0 and the exact
// then the approximate outputs, or status 1 (compile) or 2 (launch) and
// the error text.
type Record struct {
	Seed   uint64
	Status uint32
	Data   []byte
}

// SlotDiff is one exact output on which the emulator and the device
// differ.
type SlotDiff struct {
	Thread    int
	Slot      Slot
	Emu, Dev  uint64
	Family    string // the opcode of the instruction that last wrote it
	SlotIndex int
}

// DiffSlots lists where two exact-output buffers of p differ, slot by
// slot (the accumulators count as slot -1).
func DiffSlots(p *Program, emu, dev []byte) []SlotDiff {
	var ds []SlotDiff
	for i := 0; i < accBytes; i += 8 {
		if e, d := leBytes(emu[i:i+8]), leBytes(dev[i:i+8]); e != d {
			ds = append(ds, SlotDiff{Thread: -1, Slot: Slot{Off: i, Size: 8, Reg: fmt.Sprintf("accumulator %d", i/8)}, Emu: e, Dev: d, Family: "atom.acc", SlotIndex: -1})
		}
	}
	for t := 0; t < p.Threads(); t++ {
		for s, sl := range p.Slots {
			e, d := p.slotValue(emu, t, s), p.slotValue(dev, t, s)
			if e != d {
				ds = append(ds, SlotDiff{Thread: t, Slot: sl, Emu: e, Dev: d, Family: opcode(sl.Last), SlotIndex: s})
			}
		}
		base := accBytes + t*p.OutStride + p.OutStride - 16
		for i := 0; i < 16; i += 4 {
			if e, d := leBytes(emu[base+i:base+i+4]), leBytes(dev[base+i:base+i+4]); e != d {
				ds = append(ds, SlotDiff{Thread: t, Slot: Slot{Off: p.OutStride - 16 + i, Size: 4, Reg: "own atomic word"}, Emu: e, Dev: d, Family: "atom.own", SlotIndex: -1})
			}
		}
	}
	return ds
}

// opcode is the instruction's opcode with its modifiers ("cvt.rzi.s32.f64").
func opcode(text string) string {
	t := strings.TrimSpace(text)
	if strings.HasPrefix(t, "@") {
		if i := strings.IndexByte(t, ' '); i > 0 {
			t = t[i+1:]
		}
	}
	if strings.HasPrefix(t, "{") {
		return "call"
	}
	if i := strings.IndexByte(t, ' '); i > 0 {
		return t[:i]
	}
	return t
}

// Families lists the instruction families of the programs of seeds
// (generator version v) with how many instructions of each they hold,
// sorted by name.
func Families(v int, seeds []uint64) []string {
	total := map[string]int{}
	for _, s := range seeds {
		for f, n := range GenerateWith(s, Options{Version: v}).Families {
			total[f] += n
		}
	}
	var out []string
	for f, n := range total {
		out = append(out, fmt.Sprintf("%s %d", f, n))
	}
	sort.Strings(out)
	return out
}

// WriteRecord writes r in gpurun's format.
func WriteRecord(w io.Writer, r Record) error {
	var hdr [16]byte
	binary.LittleEndian.PutUint64(hdr[:], r.Seed)
	binary.LittleEndian.PutUint32(hdr[8:], r.Status)
	binary.LittleEndian.PutUint32(hdr[12:], uint32(len(r.Data)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(r.Data)
	return err
}
