package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

func helloBytes(t *testing.T, h *Hello) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteHello(&b, h); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestHelloRoundTrip(t *testing.T) {
	tests := []Hello{
		{Token: "t"},
		{Token: strings.Repeat("x", MaxTokenLen), LastSeq: 1 << 40},
		{Flags: HelloResume, Token: "tok", SessionID: "s-0123456789ab", Secret: "00112233445566778899aabbccddeeff", LastSeq: 77},
		{Token: "tok", Attrs: Attrs{Priority: -5, Labels: "job=42,user=ann"}},
		{Token: "tok", Attrs: Attrs{Priority: 1 << 30}},
	}
	for _, want := range tests {
		got, err := ReadHello(bytes.NewReader(helloBytes(t, &want)))
		if err != nil {
			t.Fatalf("%+v: %v", want, err)
		}
		want.Version = Version
		if *got != want {
			t.Errorf("got %+v, want %+v", *got, want)
		}
	}
}

func TestReadHelloRejects(t *testing.T) {
	good := helloBytes(t, &Hello{Token: "tok"})
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name    string
		b       []byte
		proto   bool // errors.Is(err, ErrProtocol)
		version bool
	}{
		{"http request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), true, false},
		{"short", good[:10], false, false},
		{"token too long", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[8:], MaxTokenLen+1); return b }), true, false},
		{"session id too long", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[10:], MaxSessionIDLen+1); return b }), true, false},
		{"secret too long", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[12:], MaxSecretLen+1); return b }), true, false},
		{"attributes shorter than a priority", mutate(func(b []byte) []byte { b[14] = 1; return b }), true, false},
		{"attributes too long", mutate(func(b []byte) []byte { binary.LittleEndian.PutUint16(b[14:], MaxAttrsLen+1); return b }), true, false},
		{"truncated attributes", mutate(func(b []byte) []byte { b[14] = 8; return b }), false, false},
		{"other version", mutate(func(b []byte) []byte { b[4] = 9; return b }), false, true},
		{"truncated token", good[:len(good)-1], false, false},
		{"resume without id", helloBytes(t, &Hello{Flags: HelloResume, Token: "t"}), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHello(bytes.NewReader(tc.b))
			if err == nil {
				t.Fatal("accepted")
			}
			if errors.Is(err, ErrProtocol) != tc.proto || errors.Is(err, ErrVersion) != tc.version {
				t.Errorf("err = %v: protocol %v version %v, want %v %v", err, errors.Is(err, ErrProtocol), errors.Is(err, ErrVersion), tc.proto, tc.version)
			}
		})
	}
}

func TestWelcomeRoundTrip(t *testing.T) {
	tests := []Welcome{
		{Status: StatusOK, SessionID: "s-1", Secret: "sec", MaxFrame: DefaultMaxFrame, LastExecuted: 42},
		{Status: StatusMoved, Message: "10.0.0.2:7000", MaxFrame: MinMaxFrame},
		{Status: StatusRefused, Message: "no capacity", MaxFrame: DefaultMaxFrame},
	}
	for _, want := range tests {
		var b bytes.Buffer
		if err := WriteWelcome(&b, &want); err != nil {
			t.Fatal(err)
		}
		got, err := ReadWelcome(&b)
		if err != nil {
			t.Fatal(err)
		}
		if *got != want {
			t.Errorf("got %+v, want %+v", *got, want)
		}
	}
	// A zero MaxFrame is sent as the default.
	var b bytes.Buffer
	WriteWelcome(&b, &Welcome{})
	if got, err := ReadWelcome(&b); err != nil || got.MaxFrame != DefaultMaxFrame {
		t.Errorf("zero MaxFrame: %+v, %v", got, err)
	}
}

func TestRequestHeader(t *testing.T) {
	var b [RequestHeaderSize]byte
	tests := []struct {
		name string
		h    RequestHeader
		ok   bool
	}{
		{"sync", RequestHeader{Len: 16, Op: OpMemAlloc, Seq: 1}, true},
		{"async with ack", RequestHeader{Len: 100, Op: OpLaunch, Flags: FlagAsync | FlagAckRequest, Seq: 9}, true},
		{"unknown op passes the framing layer", RequestHeader{Op: 9999, Seq: 3}, true},
		{"bulk", RequestHeader{Len: 32, Op: OpMemcpyHtoD, Seq: 4, Bulk: 256 << 20}, true},
		{"at the limit", RequestHeader{Len: DefaultMaxFrame, Op: OpLaunch, Seq: 5}, true},
		{"over the limit", RequestHeader{Len: DefaultMaxFrame + 1, Op: OpLaunch, Seq: 5}, false},
		{"bulk over the limit", RequestHeader{Op: OpMemcpyHtoD, Seq: 5, Bulk: MaxBulk + 1}, false},
		{"unknown flag", RequestHeader{Op: OpLaunch, Flags: 0x80, Seq: 5}, false},
		{"seq zero", RequestHeader{Op: OpLaunch}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.h.Put(b[:])
			got, err := DecodeRequestHeader(b[:], DefaultMaxFrame)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrProtocol) {
				t.Errorf("err %v is not a protocol error", err)
			}
			if err == nil && got != tc.h {
				t.Errorf("got %+v, want %+v", got, tc.h)
			}
		})
	}
	if _, err := DecodeRequestHeader(b[:5], DefaultMaxFrame); err == nil {
		t.Error("short header accepted")
	}
}

func TestReplyHeaderAndNotices(t *testing.T) {
	var b [ReplyHeaderSize]byte
	h := ReplyHeader{Len: 8, Kind: KindReply, Result: 2, Seq: 10, Executed: 10, Bulk: 4096}
	h.Put(b[:])
	if got, err := DecodeReplyHeader(b[:], DefaultMaxFrame); err != nil || got != h {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, bad := range []ReplyHeader{{Kind: 0}, {Kind: 99}, {Kind: KindReply, Len: DefaultMaxFrame + 1}} {
		bad.Put(b[:])
		if _, err := DecodeReplyHeader(b[:], DefaultMaxFrame); !errors.Is(err, ErrProtocol) {
			t.Errorf("%+v: err = %v", bad, err)
		}
	}

	var w bytes.Buffer
	if err := WriteMoved(&w, "10.1.0.2:7000"); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReplyHeader(w.Bytes(), DefaultMaxFrame)
	if err != nil || got.Kind != KindMoved || string(w.Bytes()[ReplyHeaderSize:]) != "10.1.0.2:7000" || int(got.Len) != len("10.1.0.2:7000") {
		t.Errorf("moved notice: %+v %v %q", got, err, w.Bytes())
	}
	if err := WriteMoved(io.Discard, ""); err == nil {
		t.Error("empty address accepted")
	}
}

func TestCodec(t *testing.T) {
	var e Enc
	e.U32(1)
	e.I32(-2)
	e.U64(3)
	e.F32(1.5)
	e.Bool(true)
	e.Str("name")
	e.Bytes([]byte{9, 8})
	e.Fixed([]byte{7, 7, 7})
	d := NewDec(e.B)
	if d.U32() != 1 || d.I32() != -2 || d.U64() != 3 || d.F32() != 1.5 || !d.Bool() || d.Str() != "name" ||
		!bytes.Equal(d.Bytes(), []byte{9, 8}) || !bytes.Equal(d.Fixed(3), []byte{7, 7, 7}) || d.Err() != nil {
		t.Fatalf("round trip failed: %v", d.Err())
	}
	tests := []struct {
		name string
		b    []byte
		read func(d *Dec)
	}{
		{"short u64", []byte{1, 2, 3}, func(d *Dec) { d.U64() }},
		{"string longer than block", []byte{0xff, 0xff, 0xff, 0xff, 'a'}, func(d *Dec) { d.Str() }},
		{"trailing bytes", []byte{1, 0, 0, 0, 5}, func(d *Dec) { d.U32() }},
		{"negative fixed", nil, func(d *Dec) { d.Fixed(-1) }},
	}
	for _, tc := range tests {
		d := NewDec(tc.b)
		tc.read(d)
		if err := d.Err(); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestOps(t *testing.T) {
	if OpLaunch.String() != "Launch" || Op(60000).String() != "op(60000)" {
		t.Errorf("names: %s %s", OpLaunch, Op(60000))
	}
	if !OpLaunch.AsyncAllowed() || OpMemAlloc.AsyncAllowed() || !OpMemAlloc.Known() || Op(60000).Known() {
		t.Error("op properties wrong")
	}
}

// Fuzz targets: decoders must never panic and must bound what they read.

func FuzzDecodeHello(f *testing.F) {
	f.Add([]byte("GPUH\x01\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00tok"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHello(bytes.NewReader(b))
		if err == nil && (len(h.Token) > MaxTokenLen || len(h.SessionID) > MaxSessionIDLen || len(h.Secret) > MaxSecretLen) {
			t.Fatalf("oversized fields accepted: %+v", h)
		}
	})
}

func FuzzDecodeWelcome(f *testing.F) {
	var b bytes.Buffer
	WriteWelcome(&b, &Welcome{SessionID: "s-1", Secret: "x", LastExecuted: 3})
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := ReadWelcome(bytes.NewReader(b))
		if err == nil && w.MaxFrame < MinMaxFrame {
			t.Fatalf("max frame %d accepted", w.MaxFrame)
		}
	})
}

func FuzzDecodeFrameHeaders(f *testing.F) {
	var b [ReplyHeaderSize]byte
	(&RequestHeader{Len: 16, Op: OpMemAlloc, Seq: 1}).Put(b[:])
	f.Add(b[:], uint32(DefaultMaxFrame))
	f.Fuzz(func(t *testing.T, b []byte, maxFrame uint32) {
		if h, err := DecodeRequestHeader(b, maxFrame); err == nil && (h.Len > maxFrame || h.Seq == 0 || h.Bulk > MaxBulk) {
			t.Fatalf("bad request header accepted: %+v", h)
		}
		if h, err := DecodeReplyHeader(b, maxFrame); err == nil && h.Len > maxFrame {
			t.Fatalf("bad reply header accepted: %+v", h)
		}
	})
}
