// Command ptxgen writes batches of generated PTX kernels for a GPU to run,
// turns the GPU's outputs into a corpus, replays a corpus on the PTX
// emulator, and compares instruction traces of the two. See
// e2e/ptxgen/README.md.
//
//	ptxgen batch -dir DIR -from 1 -count 4096 [-version V] [-trace] [-seeds FILE] [-prefixes]
//	ptxgen record -dir DIR -results 'R*.bin' -corpus h200.txt -note "..." -report report.txt -diffs diffs.bin -failing failing.txt
//	ptxgen check -corpus e2e/ptxgen/corpus/h200.txt [-seed N] [-diffs diffs.bin]
//	ptxgen show -seed N [-version V] [-trace] [-stmts K]
//	ptxgen explain -diffs diffs.bin [-version V]
//	ptxgen tracereduce -dir DIR -results 'T*.bin' -out traces.bin [-keep 8]
//	ptxgen trace -traces traces.bin [-seed N]
//	ptxgen bisect -dir DIR -results R.bin
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
	cmds := map[string]func([]string) error{
		"batch": batch, "record": record, "check": check, "show": show, "explain": explain,
		"tracereduce": tracereduce, "trace": trace, "bisect": bisect, "probe": probe, "probecheck": probecheck,
	}
	var names []string
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(os.Args) < 2 || cmds[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: ptxgen %s [flags] (see e2e/ptxgen/README.md)\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	if err := cmds[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "ptxgen:", err)
		os.Exit(1)
	}
}

// seedList is the seeds a command works on: -seeds FILE, or -count seeds
// from -from.
func seedList(file string, from uint64, count int) ([]uint64, error) {
	if file != "" {
		return ptxgen.ReadSeeds(file)
	}
	var out []uint64
	for i := 0; i < count; i++ {
		out = append(out, from+uint64(i))
	}
	return out, nil
}

// batch writes what gpurun reads: a manifest and, per kernel, the PTX,
// the input buffer and the output buffer's initial contents. -trace
// writes the instrumented kernels (ptxgen trace compares their traces),
// -prefixes every prefix of each seed (ptxgen bisect reads their runs).
func batch(args []string) error {
	fs := flag.NewFlagSet("batch", flag.ExitOnError)
	dir := fs.String("dir", "", "directory to write")
	from := fs.Uint64("from", 1, "first seed")
	count := fs.Int("count", 4096, "number of kernels")
	seedsFile := fs.String("seeds", "", "a file of seeds, one per line, instead of -from and -count")
	version := fs.Int("version", ptxgen.Version, "generator version")
	traced := fs.Bool("trace", false, "write the kernels instrumented to record every instruction's result")
	prefixes := fs.Bool("prefixes", false, "write every prefix of each seed (the first 1, 2, ... statements), in order")
	fs.Parse(args)
	if *dir == "" {
		return fmt.Errorf("batch needs -dir")
	}
	if err := ptxgen.CheckVersion(*version); err != nil {
		return err
	}
	seeds, err := seedList(*seedsFile, *from, *count)
	if err != nil {
		return err
	}
	var ks []ptxgen.BatchKernel
	for _, s := range seeds {
		p := ptxgen.GenerateWith(s, ptxgen.Options{Version: *version})
		if !*prefixes {
			k := ptxgen.BatchKernel{ID: s, Program: p}
			if *traced {
				k.Trace = p.Trace()
			}
			ks = append(ks, k)
			continue
		}
		for n := 1; n <= p.Stmts(); n++ {
			q := ptxgen.GenerateWith(s, ptxgen.Options{Version: *version, MaxStmts: n})
			ks = append(ks, ptxgen.BatchKernel{ID: ptxgen.PrefixID(s, n), Program: q})
		}
	}
	return ptxgen.WriteBatch(*dir, *version, ks)
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
	failing := fs.String("failing", "", "file to list the seeds the emulator does not reproduce in (\"SEED OUTCOME\")")
	fs.Parse(args)
	recs, err := readGlob(*results)
	if err != nil {
		return err
	}
	seeds, version, err := ptxgen.ReadBatch(*dir)
	if err != nil {
		return err
	}
	c := &ptxgen.Corpus{Version: version, Note: *note}
	var rep strings.Builder
	compileErrs, missing := 0, 0
	for _, s := range seeds {
		r, ok := recs[s]
		if !ok {
			missing++
			fmt.Fprintf(&rep, "seed %d: no result from the device\n", s)
			continue
		}
		switch r.Status {
		case 0:
			p := ptxgen.GenerateWith(s, ptxgen.Options{Version: version})
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
	fmt.Fprintf(&rep, "%d kernels, %d ran, %d did not compile, %d have no result\n", len(seeds), len(c.Entries), compileErrs, missing)
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
	var fail strings.Builder
	for i, r := range res {
		if !r.Outcome.Failed() {
			continue
		}
		fmt.Fprintf(&fail, "%d %s\n", r.Seed, strings.ReplaceAll(r.Outcome.String(), " ", "_"))
		e := c.Entries[i]
		if r.Outcome != ptxgen.Mismatch {
			fmt.Fprintf(&rep, "seed %d: %s: %s\n", r.Seed, r.Outcome, r.Detail)
			continue
		}
		p := ptxgen.GenerateWith(e.Seed, ptxgen.Options{Version: version})
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
	if *failing != "" {
		if err := os.WriteFile(*failing, []byte(fail.String()), 0o644); err != nil {
			return err
		}
	}
	if *report != "" {
		if err := os.WriteFile(*report, []byte(rep.String()), 0o644); err != nil {
			return err
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d kernels of the batch have no result from the device", missing)
	}
	return nil
}

// readGlob reads every result file that pattern matches.
func readGlob(pattern string) (map[uint64]ptxgen.Record, error) {
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no result files match %q", pattern)
	}
	sort.Strings(files)
	return ptxgen.ReadResultFiles(files...)
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
		if dev, err = ptxgen.ReadResultFiles(*diffs); err != nil {
			return err
		}
	}
	for _, r := range res {
		if !r.Outcome.Failed() && r.Outcome != ptxgen.Refused {
			continue
		}
		fmt.Printf("seed %d: %s: %s\n", r.Seed, r.Outcome, r.Detail)
		if d, ok := dev[r.Seed]; ok && r.Outcome == ptxgen.Mismatch {
			p := ptxgen.GenerateWith(r.Seed, ptxgen.Options{Version: c.Version})
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
	version := fs.Int("version", ptxgen.Version, "generator version")
	traced := fs.Bool("trace", false, "show the kernel instrumented for a trace")
	stmts := fs.Int("stmts", 0, "show only the first this many statements (a prefix)")
	fs.Parse(args)
	if err := ptxgen.CheckVersion(*version); err != nil {
		return err
	}
	p := ptxgen.GenerateWith(*seed, ptxgen.Options{Version: *version, MaxStmts: *stmts})
	if *traced {
		t := p.Trace()
		fmt.Print(t.PTX)
		fmt.Printf("// trace: %d instructions traced, %d bytes per thread\n", len(t.Points), t.Stride)
	} else {
		fmt.Print(p.PTX)
	}
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
	version := fs.Int("version", ptxgen.Version, "generator version of the kernels")
	fs.Parse(args)
	if err := ptxgen.CheckVersion(*version); err != nil {
		return err
	}
	dev, err := ptxgen.ReadResultFiles(*diffs)
	if err != nil {
		return err
	}
	byOp := map[string][]ptxgen.Finding{}
	kernels := map[string]map[uint64]bool{}
	for seed, rec := range dev {
		p := ptxgen.GenerateWith(seed, ptxgen.Options{Version: *version})
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
	for _, p := range append(ptxgen.Probes(), ptxgen.PendingProbes()...) {
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
	for _, p := range append(ptxgen.Probes(), ptxgen.PendingProbes()...) {
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
