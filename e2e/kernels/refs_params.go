package kernels

import (
	"encoding/binary"
	"math"
)

// narrow.cu, params.cu

func refNarrowTypes(c *Case, m Mem) {
	i8, u8 := Get[int8](m, "i8"), Get[uint8](m, "u8")
	i16, u16 := Get[int16](m, "i16"), Get[uint16](m, "u16")
	out, o8, o16, sh := Get[int32](m, "out"), Get[int8](m, "o8"), Get[uint16](m, "o16"), Get[uint8](m, "sh")
	nn := n(c)
	for i := range nn {
		a, b, cc, d := int32(i8[i]), int32(u8[i]), int32(i16[i]), int32(u16[i])
		out[4*i] = a*b + cc
		out[4*i+1] = int32(int8(a + b))
		out[4*i+2] = int32(int16(cc*3 + d))
		out[4*i+3] = int32(uint8(d>>3)) | int32(int8(b))<<8
		o8[i] = int8(a ^ b)
		o16[i] = uint16(cc + d)
		// The byte that thread (tid*7)&255 of this block put in shared memory.
		t := i % 256
		j := (t * 7) & 255
		src := i - t + j
		sh[i] = 0
		if src < nn {
			sh[i] = u8[src] ^ uint8(j)
		}
	}
	Put(m, "out", out)
	Put(m, "o8", o8)
	Put(m, "o16", o16)
	Put(m, "sh", sh)
}

func refBytesV4(c *Case, m Mem) {
	in, out := Get[uint8](m, "in"), Get[uint8](m, "out")
	for i := range n(c) {
		x, y, z, w := in[4*i], in[4*i+1], in[4*i+2], in[4*i+3]
		copy(out[4*i:], []uint8{w, z + 1, y ^ x, x})
	}
	Put(m, "out", out)
}

// config is struct Config of params.cu, decoded from its C layout.
type config struct {
	scale   float32
	offset  int32
	bias    float64
	tag     int16
	flag    int8
	weights [4]float32
	big     int64
}

func decodeConfig(b []byte) config {
	if len(b) != 48 {
		panic("struct Config is 48 bytes")
	}
	le := binary.LittleEndian
	f32 := func(off int) float32 { return math.Float32frombits(le.Uint32(b[off:])) }
	return config{
		scale:   f32(0),
		offset:  int32(le.Uint32(b[4:])),
		bias:    math.Float64frombits(le.Uint64(b[8:])),
		tag:     int16(le.Uint16(b[16:])),
		flag:    int8(b[18]),
		weights: [4]float32{f32(20), f32(24), f32(28), f32(32)},
		big:     int64(le.Uint64(b[40:])),
	}
}

func refStructParam(c *Case, m Mem) {
	cfg := decodeConfig(c.RawBytes("cfg"))
	in, out, fields := Get[float32](m, "in"), Get[float32](m, "out"), Get[float64](m, "fields")
	for i := range n(c) {
		out[i] = fma32(in[i], cfg.scale, cfg.weights[i&3]) + float32(cfg.offset)
	}
	copy(fields, []float64{cfg.bias, float64(cfg.tag), float64(cfg.flag), float64(cfg.big),
		float64(cfg.scale), float64(cfg.offset), float64(cfg.weights[0]), float64(cfg.weights[3])})
	Put(m, "out", out)
	Put(m, "fields", fields)
}

func refMixedParams(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int64](m, "out")
	i32, l := c.Int("i32"), c.Int("l")
	copy(out, []int64{c.Int("c"), c.Int("uc"), c.Int("s"), c.Int("us"), i32, l,
		int64(c.F32("f") * 1024), int64(c.F64("d") * 1024)})
	for i := range n(c) {
		out[8+i] = int64(in[i])*i32 + l
	}
	Put(m, "out", out)
}

func refManyParams(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	var s int32
	for k := range 21 {
		s += int32(c.Int("p"+itoa(k))) * int32(k+1)
	}
	for i := range n(c) {
		out[i] = in[i] + s
	}
	Put(m, "out", out)
}

func refBounded(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	B := int(c.Block[0])
	for i := range n(c) {
		out[i] = in[i]*2 + int32(i%B)
	}
	Put(m, "out", out)
}
