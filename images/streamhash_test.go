package images

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

func TestStreamHashMatchesSHA256(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 3*streamHashBatch/16+5)
	tests := []struct {
		name   string
		pieces [][]byte
	}{
		{"nothing", nil},
		{"one small", [][]byte{[]byte("hello")}},
		{"many headers", bytes.SplitAfter(bytes.Repeat([]byte("hdr.."), 400000), []byte("."))},
		{"larger than all batches", [][]byte{big}},
		{"small, large, small", [][]byte{[]byte("a"), big, []byte("z")}},
		{"exactly one batch", [][]byte{big[:streamHashBatch]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := newStreamHash()
			defer sh.close()
			all := sha256.New()
			for i, p := range tt.pieces {
				sh.write(p)
				all.Write(p)
				if i == len(tt.pieces)/2 { // a mid-stream sum must not disturb the stream
					if got, want := sh.sum(), all.Sum(nil); !bytes.Equal(got, want) {
						t.Fatalf("mid-stream sum %x, want %x", got, want)
					}
				}
			}
			if got, want := sh.sum(), all.Sum(nil); !bytes.Equal(got, want) {
				t.Fatalf("sum %x, want %x", got, want)
			}
		})
	}
}
