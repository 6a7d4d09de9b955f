// Command ptxgen writes batches of generated PTX kernels for a GPU to run,
// turns the GPU's outputs into a corpus, and replays a corpus on the PTX
// emulator. See e2e/ptxgen/README.md.
//
//	ptxgen batch -dir DIR -from 1 -count 4096
//	ptxgen record -dir DIR -results 'R*.bin' -corpus h200.txt -note "..." -report report.txt -diffs diffs.bin
//	ptxgen check -corpus e2e/ptxgen/corpus/h200.txt [-seed N] [-diffs diffs.bin]
//	ptxgen show -seed N
//	ptxgen explain -diffs diffs.bin
//	ptxgen probe -dir DIR
//	ptxgen probecheck -results h200-probes.bin
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/gpuctl/gpuctl/e2e/ptxgen"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: ptxgen batch|record|check|show [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "batch":
		err = batch(os.Args[2:])
	case "record":
		err = record(os.Args[2:])
	case "check":
		err = check(os.Args[2:])
	case "show":
		err = show(os.Args[2:])
	case "explain":
		err = explain(os.Args[2:])
	case "probe":
		err = probe(os.Args[2:])
	case "probecheck":
		err = probecheck(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want batch, record, check or show", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
}

// batch writes what gpurun reads: a manifest and, per seed, the PTX, the
// input buffer and the output buffer's initial contents.
func batch(args []string) error {
	fs := flag.NewFlagSet("batch", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write")
	from := fs.Uint64("from", 1, "first seed")
	count := fs.Int("count", 4096, "number of kernels")
	fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("batch needs -dir")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	var man strings.Builder
	for i := 0; i < *count; i++ {
		s := *from + uint64(i)
		p := ptxgen.Generate(s)
		for ext, b := range map[string][]byte{"ptx": []byte(p.PTX), "in": p.In, "init": p.OutInit} {
			if err := os.WriteFile(filepath.Join(*dir, fmt.Sprintf("%d.%s", s, ext)), b, 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(&man, "%d %d %d %d %d %d %d\n", s, p.Grid, p.Block, len(p.In), p.OutLen(), p.ApproxLen, p.Scalar)
	}
	return os.WriteFile(filepath.Join(*dir, "manifest"), []byte(man.String()), 0o644)
}

// record turns gpurun's results into a corpus, and compares each kernel
// with the emulator on the way: the report says, per instruction, where
// they differ, and -diffs keeps the device's outputs of differing kernels.
func record(args []string) error {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	dir := fs.String("dir", "", "the batch directory (for its manifest)")
	results := fs.String("results", "", "gpurun result files (a glob)")
	corpusPath := fs.String("corpus", "", "corpus file to write (TEXT.txt; TEXT.approx beside it)")
	note := fs.String("note", "", "the device, driver and compiler, for the corpus header")
	report := fs.String("report", "", "report file to write")
	diffs := fs.String("diffs", "", "file for the device outputs of kernels that differ")
	maxDiffs := fs.Int("maxdiffs", 200, "at most this many kernels in -diffs")
	fs.Parse(args)
	files, err := filepath.Glob(*results)
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no result files match %q", *results)
	}
	recs := map[uint64]ptxgen.Record{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return err
		}
		m, err := ptxgen.ReadResults(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for k, v := range m {
			recs[k] = v
		}
	}
	man, err := os.ReadFile(filepath.Join(*dir, "manifest"))
	if err != nil {
		return err
	}
	var seeds []uint64
	for _, l := range strings.Split(strings.TrimSpace(string(man)), "\n") {
		var s uint64
		if _, err := fmt.Sscan(l, &s); err == nil {
			seeds = append(seeds, s)
		}
	}
	c := &ptxgen.Corpus{Version: ptxgen.Version, Note: *note}
	var rep strings.Builder
	compileErrs := 0
	for _, s := range seeds {
		r, ok := recs[s]
		if !ok {
			fmt.Fprintf(&rep, "seed %d: no result from the device\n", s)
			continue
		}
		switch r.Status {
		case 0:
			p := ptxgen.Generate(s)
			out := r.Data[:p.OutLen()]
			c.Entries = append(c.Entries, ptxgen.Entry{Seed: s, Hash: ptxgen.Digest(out), Approx: r.Data[p.OutLen():]})
		case 1:
			compileErrs++
			if compileErrs <= 20 {
				fmt.Fprintf(&rep, "seed %d: the driver did not compile it: %s\n", s, r.Data)
			}
		default:
			name := strings.SplitN(string(r.Data), "\n", 2)[0]
			c.Entries = append(c.Entries, ptxgen.Entry{Seed: s, Err: name})
		}
	}
	fmt.Fprintf(&rep, "%d kernels, %d ran, %d did not compile\n", len(seeds), len(c.Entries), compileErrs)
	if err := ptxgen.WriteCorpus(c, *corpusPath); err != nil {
		return err
	}
	// Compare with the emulator, in parallel.
	res := ptxgen.Replay(context.Background(), c, runtime.GOMAXPROCS(0))
	fmt.Fprintln(&rep, ptxgen.Summary(res))
	byFam := map[string]int{}
	examples := map[string][]string{}
	var df *os.File
	if *diffs != "" {
		if df, err = os.Create(*diffs); err != nil {
			return err
		}
		defer df.Close()
	}
	kept := 0
	var mu sync.Mutex
	for i, r := range res {
		if !r.Outcome.Failed() {
			continue
		}
		e := c.Entries[i]
		if r.Outcome != ptxgen.Mismatch {
			fmt.Fprintf(&rep, "seed %d: %s: %s\n", r.Seed, r.Outcome, r.Detail)
			continue
		}
		p := ptxgen.Generate(e.Seed)
		emu, _, err := ptxgen.RunEmulator(context.Background(), p, 1)
		if err != nil {
			continue
		}
		dev := recs[e.Seed].Data[:p.OutLen()]
		seen := map[string]bool{}
		for _, d := range ptxgen.DiffSlots(p, emu, dev) {
			mu.Lock()
			if !seen[d.Family] {
				byFam[d.Family]++
				seen[d.Family] = true
			}
			if len(examples[d.Family]) < 6 {
				examples[d.Family] = append(examples[d.Family], fmt.Sprintf("seed %d thread %d %s (%s): emulator %#x device %#x", e.Seed, d.Thread, d.Slot.Reg, d.Slot.Last, d.Emu, d.Dev))
			}
			mu.Unlock()
		}
		if df != nil && kept < *maxDiffs {
			kept++
			ptxgen.WriteRecord(df, recs[e.Seed])
		}
	}
	var fams []string
	for f := range byFam {
		fams = append(fams, f)
	}
	sort.Slice(fams, func(i, j int) bool { return byFam[fams[i]] > byFam[fams[j]] })
	fmt.Fprintf(&rep, "\nkernels with a differing output, by the instruction that wrote it:\n")
	for _, f := range fams {
		fmt.Fprintf(&rep, "%6d %s\n", byFam[f], f)
		for _, ex := range examples[f] {
			fmt.Fprintf(&rep, "         %s\n", ex)
		}
	}
	fmt.Print(rep.String())
	if *report != "" {
		return os.WriteFile(*report, []byte(rep.String()), 0o644)
	}
	return nil
}

// check replays a corpus (or one seed of it) on the emulator; with
// -diffs it also compares slot by slot with the device's outputs kept
// by record.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	corpusPath := fs.String("corpus", "e2e/ptxgen/corpus/h200.txt", "corpus file")
	seed := fs.Uint64("seed", 0, "only this seed")
	diffs := fs.String("diffs", "", "device outputs written by record -diffs")
	fs.Parse(args)
	c, err := ptxgen.ReadCorpus(*corpusPath)
	if err != nil {
		return err
	}
	if *seed != 0 {
		var keep []ptxgen.Entry
		for _, e := range c.Entries {
			if e.Seed == *seed {
				keep = append(keep, e)
			}
		}
		c.Entries = keep
	}
	res := ptxgen.Replay(context.Background(), c, 0)
	var dev map[uint64]ptxgen.Record
	if *diffs != "" {
		f, err := os.Open(*diffs)
		if err != nil {
			return err
		}
		dev, err = ptxgen.ReadResults(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	for _, r := range res {
		if !r.Outcome.Failed() && r.Outcome != ptxgen.Refused {
			continue
		}
		fmt.Printf("seed %d: %s: %s\n", r.Seed, r.Outcome, r.Detail)
		if d, ok := dev[r.Seed]; ok && r.Outcome == ptxgen.Mismatch {
			p := ptxgen.Generate(r.Seed)
			emu, _, err := ptxgen.RunEmulator(context.Background(), p, 1)
			if err != nil {
				continue
			}
			for i, sd := range ptxgen.DiffSlots(p, emu, d.Data[:p.OutLen()]) {
				if i == 20 {
					break
				}
				fmt.Printf("  thread %d %s = `%s`: emulator %#x device %#x\n", sd.Thread, sd.Slot.Reg, sd.Slot.Last, sd.Emu, sd.Dev)
			}
		}
	}
	fmt.Println(ptxgen.Summary(res))
	return nil
}

// show prints a seed's PTX and launch.
func show(args []string) error {
	fs := flag.NewFlagSet("show", flag.ExitOnError)
	seed := fs.Uint64("seed", 1, "seed")
	fs.Parse(args)
	p := ptxgen.Generate(*seed)
	fmt.Print(p.PTX)
	fmt.Printf("// grid %d, block %d, scalar %#x, %d slots of %d bytes per thread, %d approximate\n", p.Grid, p.Block, p.Scalar, len(p.Slots), p.OutStride, len(p.Approx))
	return nil
}

// explain finds, in the device outputs kept by record -diffs, the
// instructions the emulator computes differently given the device's own
// operands, and counts them by opcode.
func explain(args []string) error {
	fs := flag.NewFlagSet("explain", flag.ExitOnError)
	diffs := fs.String("diffs", "", "device outputs written by record -diffs")
	per := fs.Int("examples", 4, "examples per opcode")
	fs.Parse(args)
	f, err := os.Open(*diffs)
	if err != nil {
		return err
	}
	dev, err := ptxgen.ReadResults(f)
	f.Close()
	if err != nil {
		return err
	}
	byOp := map[string][]ptxgen.Finding{}
	kernels := map[string]map[uint64]bool{}
	for seed, rec := range dev {
		p := ptxgen.Generate(seed)
		emu, _, err := ptxgen.RunEmulator(context.Background(), p, 1)
		if err != nil {
			continue
		}
		for _, fd := range ptxgen.Explain(p, emu, rec.Data[:p.OutLen()]) {
			op := strings.Fields(fd.Instr)[0]
			byOp[op] = append(byOp[op], fd)
			if kernels[op] == nil {
				kernels[op] = map[uint64]bool{}
			}
			kernels[op][seed] = true
		}
	}
	var ops []string
	for op := range byOp {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool { return len(kernels[ops[i]]) > len(kernels[ops[j]]) })
	for _, op := range ops {
		fmt.Printf("%5d kernels %s\n", len(kernels[op]), op)
		for i, fd := range byOp[op] {
			if i == *per {
				break
			}
			fmt.Printf("        %s\n", fd)
		}
	}
	return nil
}

// probe writes the probe kernels as a batch for gpurun.
func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write")
	fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("probe needs -dir")
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	var man strings.Builder
	for _, p := range ptxgen.Probes() {
		for ext, b := range map[string][]byte{"ptx": []byte(p.PTX), "in": p.In, "init": p.OutInit} {
			if err := os.WriteFile(filepath.Join(*dir, fmt.Sprintf("%d.%s", p.Seed, ext)), b, 0o644); err != nil {
				return err
			}
		}
		fmt.Fprintf(&man, "%d %d %d %d %d %d %d\n", p.Seed, p.Grid, p.Block, len(p.In), p.OutLen()-64, 0, 0)
	}
	return os.WriteFile(filepath.Join(*dir, "manifest"), []byte(man.String()), 0o644)
}

// probecheck compares the emulator with a device's probe outputs.
func probecheck(args []string) error {
	fs := flag.NewFlagSet("probecheck", flag.ExitOnError)
	results := fs.String("results", "", "gpurun results of the probe batch")
	per := fs.Int("examples", 6, "differences shown per column")
	fs.Parse(args)
	f, err := os.Open(*results)
	if err != nil {
		return err
	}
	dev, err := ptxgen.ReadResults(f)
	f.Close()
	if err != nil {
		return err
	}
	total := 0
	for _, p := range ptxgen.Probes() {
		r, ok := dev[p.Seed]
		if !ok || r.Status != 0 {
			fmt.Printf("probe %s: no result from the device: %s\n", p.Name, r.Data)
			continue
		}
		ds, err := ptxgen.CheckProbe(p, r.Data)
		if err != nil {
			return err
		}
		total += len(ds)
		byCol := map[string][]ptxgen.ProbeDiff{}
		for _, d := range ds {
			byCol[d.Col] = append(byCol[d.Col], d)
		}
		for _, col := range p.Cols {
			if len(byCol[col]) == 0 {
				continue
			}
			fmt.Printf("%s %s: %d differ\n", p.Name, col, len(byCol[col]))
			for i, d := range byCol[col] {
				if i == *per {
					break
				}
				fmt.Printf("    %s: emulator %#x device %#x\n", d.Inputs, d.Emu, d.Dev)
			}
		}
	}
	fmt.Printf("%d probe outputs differ\n", total)
	return nil
}
