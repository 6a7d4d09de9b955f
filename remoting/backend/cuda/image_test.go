package cuda

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

func fatbin(hdr uint16, body uint64, have int) []byte {
	b := make([]byte, max(have, 16))
	binary.LittleEndian.PutUint32(b, fatbinMagic)
	binary.LittleEndian.PutUint16(b[4:], 1)
	binary.LittleEndian.PutUint16(b[6:], hdr)
	binary.LittleEndian.PutUint64(b[8:], body)
	return b[:have]
}

func elf(shoff uint64, shnum, shentsize uint16, have int) []byte {
	b := make([]byte, have)
	copy(b, "\x7fELF")
	b[4], b[5] = 2, 1
	binary.LittleEndian.PutUint64(b[0x28:], shoff)
	binary.LittleEndian.PutUint16(b[0x3a:], shentsize)
	binary.LittleEndian.PutUint16(b[0x3c:], shnum)
	return b
}

func TestPrepareImage(t *testing.T) {
	ptx := []byte(".version 8.0\n.target sm_90\n.address_size 64\n")
	wrapper := make([]byte, 24)
	binary.LittleEndian.PutUint32(wrapper, fatbinWrapperMagic)
	tests := []struct {
		name    string
		in      []byte
		want    []byte // nil: same bytes as in
		errText string
	}{
		{name: "ptx gets a NUL", in: ptx, want: append(append([]byte{}, ptx...), 0)},
		{name: "ptx with NUL", in: append(append([]byte{}, ptx...), 0)},
		{name: "fatbin", in: fatbin(16, 64, 80)},
		{name: "fatbin short body", in: fatbin(16, 65, 80), errText: "claims"},
		{name: "fatbin huge size", in: fatbin(16, ^uint64(0)-8, 80), errText: "claims"},
		{name: "fatbin tiny header", in: fatbin(8, 8, 80), errText: "claims"},
		{name: "fatbin truncated header", in: fatbin(16, 0, 12), errText: "shorter"},
		{name: "wrapper", in: wrapper, errText: "fatbin wrapper"},
		{name: "cubin", in: elf(64, 2, 64, 192)},
		{name: "cubin table past end", in: elf(64, 3, 64, 192), errText: "outside"},
		{name: "cubin offset past end", in: elf(1<<40, 1, 64, 192), errText: "outside"},
		{name: "cubin 32-bit", in: func() []byte { b := elf(64, 0, 64, 128); b[4] = 1; return b }(), errText: "ELF64"},
		{name: "empty", in: nil, errText: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := prepareImage(tt.in)
			if tt.errText != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errText) || cu.Code(err) != cu.ErrorInvalidImage {
					t.Fatalf("err = %v, want CUDA_ERROR_INVALID_IMAGE containing %q", err, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if want == nil {
				want = tt.in
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("prepared image differs: %q", got)
			}
		})
	}
}

func TestUUID(t *testing.T) {
	u := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	s := FormatUUID(u)
	if s != "GPU-deadbeef-0102-0304-0506-0708090a0b0c" {
		t.Fatalf("FormatUUID = %s", s)
	}
	tests := []struct {
		in string
		ok bool
	}{
		{s, true},
		{strings.ToUpper(s), true},
		{strings.TrimPrefix(s, "GPU-"), true},
		{"deadbeef0102030405060708090a0b0c", true},
		{"GPU-deadbeef-0102-0304-0506-0708090a0b0", false},
		{"GPU-deadbeef-01020-304-0506-0708090a0b0c", false},
		{"GPU-deadbeeg-0102-0304-0506-0708090a0b0c", false},
		{"", false},
	}
	for _, tt := range tests {
		got, err := ParseUUID(tt.in)
		if tt.ok != (err == nil) {
			t.Errorf("ParseUUID(%q) err = %v", tt.in, err)
			continue
		}
		if tt.ok && got != u {
			t.Errorf("ParseUUID(%q) = %x", tt.in, got)
		}
	}
}

func TestPickDevice(t *testing.T) {
	gpus := []string{u0, u1}
	tests := []struct {
		want string
		ord  int
		err  string
	}{
		{"", 0, ""},
		{"1", 1, ""},
		{strings.ToUpper(u1), 1, ""},
		{"2", 0, "does not exist"},
		{"-1", 0, "does not exist"},
		{v0, 0, "not on this host"},
	}
	for _, tt := range tests {
		ord, err := pickDevice(tt.want, gpus)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("pickDevice(%q) err = %v, want %q", tt.want, err, tt.err)
			}
			continue
		}
		if err != nil || ord != tt.ord {
			t.Errorf("pickDevice(%q) = %d, %v; want %d", tt.want, ord, err, tt.ord)
		}
	}
}
