package kernels

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// InitKind is how a buffer's initial contents are generated.
type InitKind uint8

const (
	InitZero  InitKind = iota + 1 // zero: every byte 0
	InitConst                     // const:V
	InitSeq                       // seq or seq:START:STEP
	InitList                      // list:V1,V2,... repeated cyclically
	InitRand                      // rand:SEED, raw xorshift32 bits (integer types)
	InitRandI                     // randi:SEED:LO:HI, integers in [LO, HI]
	InitRandF                     // randf:SEED:LO:HI, floats in [LO, HI)
	InitKeep                      // keep: globals only, the module's own initializer
)

// Init is a parsed init pattern. Values are kept as literals and converted
// with the element type when the buffer is generated.
type Init struct {
	Kind   InitKind
	Seed   uint32
	Args   []string // const: [V]; seq: [START, STEP]; list: values; randi/randf: [LO, HI]
	Source string   // the pattern as written
}

func (in Init) String() string { return in.Source }

func parseInit(s string) (Init, error) {
	name, rest, hasArgs := strings.Cut(s, ":")
	in := Init{Source: s}
	var args []string
	if hasArgs {
		args = strings.Split(rest, ":")
	}
	want := func(n int) error {
		if len(args) != n {
			return fmt.Errorf("init %q: %s takes %d ':'-separated argument(s)", s, name, n)
		}
		return nil
	}
	seed := func() error {
		v, err := strconv.ParseUint(args[0], 10, 32)
		if err != nil || v == 0 {
			return fmt.Errorf("init %q: seed must be a decimal integer in 1..4294967295", s)
		}
		in.Seed = uint32(v)
		return nil
	}
	switch name {
	case "zero":
		in.Kind = InitZero
		return in, want(0)
	case "keep":
		in.Kind = InitKeep
		return in, want(0)
	case "const":
		in.Kind, in.Args = InitConst, args
		return in, want(1)
	case "seq":
		in.Kind = InitSeq
		if !hasArgs {
			in.Args = []string{"0", "1"}
			return in, nil
		}
		in.Args = args
		return in, want(2)
	case "list":
		in.Kind = InitList
		if !hasArgs || rest == "" {
			return in, fmt.Errorf("init %q: list needs at least one value", s)
		}
		in.Args = strings.Split(rest, ",")
		return in, nil
	case "rand":
		in.Kind = InitRand
		if err := want(1); err != nil {
			return in, err
		}
		return in, seed()
	case "randi", "randf":
		in.Kind = InitRandI
		if name == "randf" {
			in.Kind = InitRandF
		}
		if err := want(3); err != nil {
			return in, err
		}
		in.Args = args[1:]
		return in, seed()
	}
	return in, fmt.Errorf("unknown init pattern %q (want zero, const:V, seq[:START:STEP], list:A,B,..., rand:SEED, randi:SEED:LO:HI, randf:SEED:LO:HI or keep)", s)
}

// xorshift32 is Marsaglia's 13/17/5 generator; the first value returned for
// seed s is one step past s.
type xorshift32 uint32

func (x *xorshift32) next() uint32 {
	v := uint32(*x)
	v ^= v << 13
	v ^= v >> 17
	v ^= v << 5
	*x = xorshift32(v)
	return v
}

// check validates an init pattern against the element type, so that a bad
// case fails at load time rather than mid-run.
func (in Init) check(t Type) error {
	switch in.Kind {
	case InitRand:
		if t.IsFloat() {
			return fmt.Errorf("init %q: rand gives raw bits and is for integer types; use randf:SEED:LO:HI for %s", in.Source, t)
		}
	case InitRandF:
		if !t.IsFloat() {
			return fmt.Errorf("init %q: randf is for f32/f64; use randi:SEED:LO:HI for %s", in.Source, t)
		}
		lo, err1 := strconv.ParseFloat(in.Args[0], 64)
		hi, err2 := strconv.ParseFloat(in.Args[1], 64)
		if err1 != nil || err2 != nil || !(lo <= hi) || math.IsInf(hi-lo, 0) {
			return fmt.Errorf("init %q: LO and HI must be finite decimals with LO <= HI", in.Source)
		}
	case InitRandI:
		lo, err1 := parseInt(in.Args[0])
		hi, err2 := parseInt(in.Args[1])
		if err1 != nil || err2 != nil || int64(lo) > int64(hi) || uint64(int64(hi)-int64(lo)) > math.MaxUint32 {
			return fmt.Errorf("init %q: LO and HI must be integers with LO <= HI and HI-LO < 2^32", in.Source)
		}
	case InitConst, InitList:
		for _, a := range in.Args {
			if _, err := parseValue(t, a); err != nil {
				return fmt.Errorf("init %q: %w", in.Source, err)
			}
		}
	case InitSeq:
		if t.IsFloat() {
			for _, a := range in.Args {
				if _, err := strconv.ParseFloat(a, 64); err != nil {
					return fmt.Errorf("init %q: START and STEP must be decimals", in.Source)
				}
			}
		} else {
			for _, a := range in.Args {
				if _, err := parseInt(a); err != nil {
					return fmt.Errorf("init %q: %w", in.Source, err)
				}
			}
		}
	}
	return nil
}

// generate returns count elements of type t, little-endian, exactly as the
// C runner produces them (README.md, "Init patterns").
func (in Init) generate(t Type, count int) []byte {
	size := t.Size()
	b := make([]byte, count*size)
	rng := xorshift32(in.Seed)
	put := func(i int, bits uint64) { store(b[i*size:], t, bits) }
	switch in.Kind {
	case InitZero, InitKeep:
	case InitConst:
		v, _ := parseValue(t, in.Args[0])
		for i := range count {
			put(i, v)
		}
	case InitList:
		vals := make([]uint64, len(in.Args))
		for k, a := range in.Args {
			vals[k], _ = parseValue(t, a)
		}
		for i := range count {
			put(i, vals[i%len(vals)])
		}
	case InitSeq:
		if t.IsFloat() {
			start, _ := strconv.ParseFloat(in.Args[0], 64)
			step, _ := strconv.ParseFloat(in.Args[1], 64)
			for i := range count {
				p := float64(float64(i) * step) // rounded on its own: no fused multiply-add
				put(i, floatBits(t, start+p))
			}
			return b
		}
		start, _ := parseInt(in.Args[0])
		step, _ := parseInt(in.Args[1])
		for i := range count {
			put(i, start+uint64(i)*step)
		}
	case InitRand:
		for i := range count {
			v := uint64(rng.next())
			if size == 8 {
				v |= uint64(rng.next()) << 32
			}
			put(i, v)
		}
	case InitRandI:
		lo, _ := parseInt(in.Args[0])
		hi, _ := parseInt(in.Args[1])
		span := hi - lo + 1 // 0 means the full 2^32 range cannot occur: span <= 2^32
		for i := range count {
			d := uint64(rng.next())
			if span != 1<<32 {
				d %= span
			}
			v := int64(lo + d)
			switch t {
			case F32:
				put(i, uint64(math.Float32bits(float32(v))))
			case F64:
				put(i, math.Float64bits(float64(v)))
			default:
				put(i, uint64(v))
			}
		}
	case InitRandF:
		lo, _ := strconv.ParseFloat(in.Args[0], 64)
		hi, _ := strconv.ParseFloat(in.Args[1], 64)
		w := hi - lo
		for i := range count {
			var u float64
			if t == F32 {
				u = float64(rng.next()>>8) * 0x1p-24
			} else {
				a := rng.next() >> 5
				c := rng.next() >> 6
				u = (float64(a)*0x1p26 + float64(c)) * 0x1p-53
			}
			p := float64(u * w) // rounded on its own: no fused multiply-add
			put(i, floatBits(t, lo+p))
		}
	}
	return b
}

// floatBits rounds v to t (nearest-even) and returns the bit pattern.
func floatBits(t Type, v float64) uint64 {
	if t == F32 {
		return uint64(math.Float32bits(float32(v)))
	}
	return math.Float64bits(v)
}
