package kernels

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Type is the element type of a buffer or a scalar parameter.
type Type uint8

const (
	I8 Type = iota + 1
	U8
	I16
	U16
	I32
	U32
	I64
	U64
	F32
	F64
	Raw // scalars only: a by-value struct, written as hex bytes
)

var typeNames = [...]string{I8: "i8", U8: "u8", I16: "i16", U16: "u16", I32: "i32", U32: "u32", I64: "i64", U64: "u64", F32: "f32", F64: "f64", Raw: "raw"}

func (t Type) String() string {
	if int(t) < len(typeNames) && typeNames[t] != "" {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Size is the element size in bytes (0 for Raw, whose size is its value's).
func (t Type) Size() int {
	switch t {
	case Raw:
		return 0
	case I8, U8:
		return 1
	case I16, U16:
		return 2
	case I32, U32, F32:
		return 4
	default:
		return 8
	}
}

// IsFloat reports whether t is f32 or f64.
func (t Type) IsFloat() bool { return t == F32 || t == F64 }

// IsSigned reports whether t is a signed integer type.
func (t Type) IsSigned() bool { return t == I8 || t == I16 || t == I32 || t == I64 }

func parseType(s string) (Type, error) {
	for t, n := range typeNames {
		if n != "" && n == s {
			return Type(t), nil
		}
	}
	return 0, fmt.Errorf("unknown type %q (want one of i8 u8 i16 u16 i32 u32 i64 u64 f32 f64, or raw for a struct scalar)", s)
}

// parseValue turns one literal into the little-endian bit pattern of a value
// of type t, truncated to t's size. Integers are decimal (optionally negative)
// or 0x-prefixed hex; floats are decimal, hex-float, nan, inf or -inf. NaN is
// always the canonical quiet NaN.
func parseValue(t Type, s string) (uint64, error) {
	if t.IsFloat() {
		if strings.EqualFold(s, "nan") {
			if t == F32 {
				return 0x7fc00000, nil
			}
			return 0x7ff8000000000000, nil
		}
		if strings.ContainsAny(s, "_") || strings.EqualFold(strings.TrimLeft(s, "+-"), "infinity") {
			return 0, fmt.Errorf("bad %s literal %q", t, s)
		}
		if t == F32 {
			f, err := strconv.ParseFloat(s, 32)
			if err != nil && !isRangeErr(err) {
				return 0, fmt.Errorf("bad f32 literal %q", s)
			}
			return uint64(math.Float32bits(float32(f))), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !isRangeErr(err) {
			return 0, fmt.Errorf("bad f64 literal %q", s)
		}
		return math.Float64bits(f), nil
	}
	v, err := parseInt(s)
	if err != nil {
		return 0, fmt.Errorf("bad %s literal %q: %w", t, s, err)
	}
	if t.Size() < 8 {
		v &= 1<<(8*t.Size()) - 1
	}
	return v, nil
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// parseInt accepts exactly what the C runner accepts: [-]decimal or
// [-]0xHEX, returning the two's-complement bit pattern.
func parseInt(s string) (uint64, error) {
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	var v uint64
	var err error
	switch {
	case body == "":
		return 0, fmt.Errorf("empty number")
	case strings.HasPrefix(body, "0x") || strings.HasPrefix(body, "0X"):
		v, err = strconv.ParseUint(body[2:], 16, 64)
	case len(body) > 1 && body[0] == '0':
		return 0, fmt.Errorf("leading zero (write decimal or 0x hex)")
	default:
		v, err = strconv.ParseUint(body, 10, 64)
	}
	if err != nil {
		return 0, fmt.Errorf("not a decimal or 0x hex integer")
	}
	if neg {
		v = -v
	}
	return v, nil
}

// store writes the low t.Size() bytes of bits at b[0:].
func store(b []byte, t Type, bits uint64) {
	for k := 0; k < t.Size(); k++ {
		b[k] = byte(bits >> (8 * k))
	}
}

// load reads one element of type t from b[0:] as a bit pattern.
func load(b []byte, t Type) uint64 {
	var v uint64
	for k := t.Size() - 1; k >= 0; k-- {
		v = v<<8 | uint64(b[k])
	}
	return v
}

// formatElem renders one element for error messages.
func formatElem(t Type, bits uint64) string {
	switch t {
	case F32:
		f := math.Float32frombits(uint32(bits))
		return fmt.Sprintf("%g (0x%08x)", f, uint32(bits))
	case F64:
		f := math.Float64frombits(bits)
		return fmt.Sprintf("%g (0x%016x)", f, bits)
	case I8:
		return strconv.Itoa(int(int8(bits)))
	case I16:
		return strconv.Itoa(int(int16(bits)))
	case I32:
		return strconv.Itoa(int(int32(bits)))
	case I64:
		return strconv.FormatInt(int64(bits), 10)
	default:
		return fmt.Sprintf("%d (0x%x)", bits, bits)
	}
}
