package ptx

// ptype is a PTX fundamental type.
type ptype uint8

const (
	tNone ptype = iota
	tU8
	tU16
	tU32
	tU64
	tS8
	tS16
	tS32
	tS64
	tB8
	tB16
	tB32
	tB64
	tB128
	tF16
	tF16x2
	tBF16
	tBF16x2
	tF32
	tF64
	tPred
	tTF32
)

var typeNames = map[string]ptype{
	"u8": tU8, "u16": tU16, "u32": tU32, "u64": tU64,
	"s8": tS8, "s16": tS16, "s32": tS32, "s64": tS64,
	"b8": tB8, "b16": tB16, "b32": tB32, "b64": tB64, "b128": tB128,
	"f16": tF16, "f16x2": tF16x2, "bf16": tBF16, "bf16x2": tBF16x2,
	"f32": tF32, "f64": tF64, "pred": tPred, "tf32": tTF32,
}

func (t ptype) String() string {
	for k, v := range typeNames {
		if v == t {
			return k
		}
	}
	return "none"
}

// size in bytes (predicates count as 1 for layout purposes).
func (t ptype) size() int {
	switch t {
	case tU8, tS8, tB8, tPred:
		return 1
	case tU16, tS16, tB16, tF16, tBF16:
		return 2
	case tU32, tS32, tB32, tF32, tF16x2, tBF16x2, tTF32:
		return 4
	case tU64, tS64, tB64, tF64:
		return 8
	case tB128:
		return 16
	}
	return 0
}

func (t ptype) bits() uint { return uint(t.size()) * 8 }

func (t ptype) signed() bool { return t >= tS8 && t <= tS64 }

func (t ptype) float() bool { return t == tF32 || t == tF64 || t == tF16 || t == tBF16 }

// mask is the all-ones value of the type's width.
func (t ptype) mask() uint64 {
	b := t.bits()
	if b >= 64 {
		return ^uint64(0)
	}
	return 1<<b - 1
}

// sext sign-extends the low bits of x to 64 bits.
func sext(x uint64, bits uint) uint64 {
	if bits >= 64 {
		return x
	}
	s := 64 - bits
	return uint64(int64(x<<s) >> s)
}

// ext widens a register value of type t to 64 bits the way t reads it:
// signed types sign-extend, everything else zero-extends.
func (t ptype) ext(x uint64) uint64 {
	if t.signed() {
		return sext(x, t.bits())
	}
	return x & t.mask()
}
