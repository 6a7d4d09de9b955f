package wire

import "math"

// Enc appends little-endian values to a byte slice; it is the Go side of
// the argument block layout that the generated C stubs write.
type Enc struct{ B []byte }

func (e *Enc) U32(v uint32)  { e.B = le.AppendUint32(e.B, v) }
func (e *Enc) I32(v int32)   { e.B = le.AppendUint32(e.B, uint32(v)) }
func (e *Enc) U64(v uint64)  { e.B = le.AppendUint64(e.B, v) }
func (e *Enc) F32(v float32) { e.B = le.AppendUint32(e.B, math.Float32bits(v)) }
func (e *Enc) Bool(v bool) {
	if v {
		e.U32(1)
	} else {
		e.U32(0)
	}
}

// Bytes writes a u32 length and the bytes.
func (e *Enc) Bytes(v []byte) { e.U32(uint32(len(v))); e.B = append(e.B, v...) }

// Str writes a u32 length and the string's bytes (no terminator).
func (e *Enc) Str(v string) { e.U32(uint32(len(v))); e.B = append(e.B, v...) }

// Fixed writes raw bytes whose length both sides know.
func (e *Enc) Fixed(v []byte) { e.B = append(e.B, v...) }

// Dec reads little-endian values from an argument block. It never panics:
// reading past the end sets a sticky error and yields zeros, so generated
// decoders check Err once at the end.
type Dec struct {
	B   []byte
	off int
	bad bool
}

func NewDec(b []byte) *Dec { return &Dec{B: b} }

func (d *Dec) take(n int) []byte {
	if d.bad || n < 0 || len(d.B)-d.off < n {
		d.bad = true
		return nil
	}
	b := d.B[d.off : d.off+n]
	d.off += n
	return b
}

func (d *Dec) U32() uint32 {
	if b := d.take(4); b != nil {
		return le.Uint32(b)
	}
	return 0
}
func (d *Dec) I32() int32 { return int32(d.U32()) }
func (d *Dec) U64() uint64 {
	if b := d.take(8); b != nil {
		return le.Uint64(b)
	}
	return 0
}
func (d *Dec) F32() float32 { return math.Float32frombits(d.U32()) }
func (d *Dec) Bool() bool   { return d.U32() != 0 }

// Bytes reads a u32 length and that many bytes (aliasing the block).
func (d *Dec) Bytes() []byte {
	n := d.U32()
	if uint64(n) > uint64(len(d.B)-d.off) {
		d.bad = true
		return nil
	}
	return d.take(int(n))
}

// Str reads a length-prefixed string.
func (d *Dec) Str() string { return string(d.Bytes()) }

// Fixed reads n raw bytes.
func (d *Dec) Fixed(n int) []byte { return d.take(n) }

// Err reports a short block or trailing bytes: both mean the peer and this
// side disagree on the layout.
func (d *Dec) Err() error {
	if d.bad {
		return protoErr("argument block too short")
	}
	if d.off != len(d.B) {
		return protoErr("argument block has %d trailing bytes", len(d.B)-d.off)
	}
	return nil
}
