package ptxgen

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PrefixSeed marks the kernels of a prefix batch (Options.MaxStmts):
// PrefixSeed | seed<<8 | k names the first k statements of seed, so that
// running them in order finds the statement at which a kernel starts to
// fault.
const PrefixSeed = 1 << 42

// PrefixID names the prefix of seed that stops after k statements.
func PrefixID(seed uint64, k int) uint64 { return PrefixSeed | seed<<8 | uint64(k) }

// SplitPrefixID undoes PrefixID.
func SplitPrefixID(id uint64) (seed uint64, k int, ok bool) {
	if id&PrefixSeed == 0 || id >= PrefixSeed<<1 {
		return 0, 0, false
	}
	return id &^ PrefixSeed >> 8, int(id & 0xff), true
}

// BatchKernel is one kernel of a batch for gpurun: a program, or its
// instrumented form when Trace is set, under a name (its seed, a probe's,
// or a PrefixID).
type BatchKernel struct {
	ID      uint64
	Program *Program
	Trace   *Trace
}

// WriteBatch writes what gpurun reads into dir: per kernel ID.ptx, ID.in
// and ID.init, and a manifest with one line per kernel ("ID GRID BLOCK
// INLEN OUTLEN APPROXLEN SCALAR", and the trace stride for an
// instrumented kernel). The generator version goes to dir/version.
func WriteBatch(dir string, version int, ks []BatchKernel) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var man strings.Builder
	for _, k := range ks {
		p := k.Program
		src := p.PTX
		if k.Trace != nil {
			src = k.Trace.PTX
		}
		for ext, b := range map[string][]byte{"ptx": []byte(src), "in": p.In, "init": p.OutInit} {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.%s", k.ID, ext)), b, 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(&man, "%d %d %d %d %d %d %d", k.ID, p.Grid, p.Block, len(p.In), p.OutLen(), p.ApproxLen, p.Scalar)
		if k.Trace != nil {
			fmt.Fprintf(&man, " %d", k.Trace.Stride)
		}
		man.WriteString("\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte(fmt.Sprintln(version)), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest"), []byte(man.String()), 0o644)
}

// ReadBatch reads a batch directory's manifest IDs, in order, and its
// generator version (Version where the batch predates the file).
func ReadBatch(dir string) (ids []uint64, version int, err error) {
	man, err := os.ReadFile(filepath.Join(dir, "manifest"))
	if err != nil {
		return nil, 0, err
	}
	for _, l := range strings.Split(strings.TrimSpace(string(man)), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, 0, fmt.Errorf("%s/manifest: %q: %w", dir, l, err)
		}
		ids = append(ids, id)
	}
	version = Version
	if b, err := os.ReadFile(filepath.Join(dir, "version")); err == nil {
		if version, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			return nil, 0, fmt.Errorf("%s/version: %w", dir, err)
		}
	}
	return ids, version, CheckVersion(version)
}

// ReadSeeds reads a list of seeds, one per line (the first field; blank
// lines and # comments skipped).
func ReadSeeds(path string) ([]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for i, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		s, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: want a seed: %w", path, i+1, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// ReadResultFiles reads gpurun's (or tracereduce's) records from files,
// gzip-compressed where their names end in .gz; a later file's record of
// a seed replaces an earlier one's.
func ReadResultFiles(paths ...string) (map[uint64]Record, error) {
	all := map[uint64]Record{}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		var r io.Reader = f
		if strings.HasSuffix(path, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			r = zr
		}
		m, err := ReadResults(r)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for k, v := range m {
			all[k] = v
		}
	}
	return all, nil
}
