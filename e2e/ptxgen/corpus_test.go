package ptxgen

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// TestGenerateDeterministic: a seed names one program, byte for byte.
func TestGenerateDeterministic(t *testing.T) {
	for _, s := range []uint64{1, 2, 99, 1 << 40} {
		a, b := Generate(s), Generate(s)
		if a.PTX != b.PTX || !bytes.Equal(a.In, b.In) || !bytes.Equal(a.OutInit, b.OutInit) || a.Scalar != b.Scalar {
			t.Fatalf("seed %d generates two different programs", s)
		}
	}
	if Generate(1).PTX == Generate(2).PTX {
		t.Fatal("seeds 1 and 2 generate the same program")
	}
}

// TestRecordRoundTrip: a corpus recorded from outputs the emulator itself
// produced replays as exact; a changed hash, a changed error and an
// approximation moved past its bound are each caught.
func TestRecordRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := &Corpus{Version: Version, Note: "emulator"}
	s := uint64(1)
	for ; len(c.Entries) < 40; s++ {
		p := Generate(s)
		out, ap, err := RunEmulator(ctx, p, 1)
		if refused(err) {
			continue // a refusal is replayed as one (TestCorpusReplay)
		}
		if err != nil {
			t.Fatalf("seed %d: %v", s, err)
		}
		c.Entries = append(c.Entries, Entry{Seed: s, Hash: Digest(out), Approx: ap})
	}
	// the device error goes to a seed the emulator runs, not refuses
	for ; ; s++ {
		if _, _, err := RunEmulator(ctx, Generate(s), 1); !refused(err) {
			break
		}
	}
	c.Entries = append(c.Entries, Entry{Seed: s, Err: "CUDA_ERROR_ILLEGAL_ADDRESS"})
	path := filepath.Join(t.TempDir(), "c.txt")
	if err := WriteCorpus(c, path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadCorpus(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := Replay(ctx, back, 2)
	for i, r := range rs[:40] {
		if r.Outcome != Exact {
			t.Errorf("seed %d: %s %s", c.Entries[i].Seed, r.Outcome, r.Detail)
		}
	}
	if rs[40].Outcome != ErrorDiffers {
		t.Errorf("a device error the emulator does not reproduce: %s, want %s", rs[40].Outcome, ErrorDiffers)
	}
	e := back.Entries[0]
	e.Hash = "0000000000000000"
	if r := Check(ctx, Version, e, 1); r.Outcome != Mismatch {
		t.Errorf("changed hash: %s, want %s", r.Outcome, Mismatch)
	}
	for _, e := range back.Entries {
		p := Generate(e.Seed)
		if len(p.Approx) == 0 {
			continue
		}
		e.Approx = append([]byte(nil), e.Approx...)
		a := p.Approx[0]
		// Flip a high mantissa bit: far outside every bound.
		e.Approx[a.Off+a.Size-2] ^= 0x10
		if r := Check(ctx, Version, e, 1); r.Outcome != ApproxBound {
			t.Errorf("seed %d: moved approximation: %s, want %s", e.Seed, r.Outcome, ApproxBound)
		}
		break
	}
}

// TestCorpusReadErrors: a corpus of another generator version is refused
// with a message that says what to do.
func TestCorpusReadErrors(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.txt")
	os.WriteFile(p, []byte("version 999\n1 0011223344556677\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "c.approx"), nil, 0o644)
	if _, err := ReadCorpus(p); err == nil || !bytes.Contains([]byte(err.Error()), []byte("record it again")) {
		t.Fatalf("version mismatch: %v", err)
	}
}

// refused reports whether err is the emulator's refusal of an instruction
// whose device result it does not know.
func refused(err error) bool {
	var ce *cu.Error
	return errors.As(err, &ce) && ce.Code == cu.ErrorNotSupported
}
