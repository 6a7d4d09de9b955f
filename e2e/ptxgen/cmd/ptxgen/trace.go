package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/gpuctl/gpuctl/e2e/ptxgen"
)

// tracereduce turns gpurun's runs of an instrumented batch (batch -trace)
// into a compact file for trace: every thread's count and digest, and in
// full the traces of the threads that differ earliest from this
// emulator.
func tracereduce(args []string) error {
	fs := flag.NewFlagSet("tracereduce", flag.ExitOnError)
	dir := fs.String("dir", "", "the instrumented batch's directory")
	results := fs.String("results", "", "gpurun result files of the batch (a glob)")
	outPath := fs.String("out", "", "file to write")
	keep := fs.Int("keep", 8, "threads kept in full per kernel")
	budget := fs.Int("budget", 4096, "entries kept per kernel beyond its first kept thread's")
	fs.Parse(args)
	if *dir == "" || *outPath == "" {
		return fmt.Errorf("tracereduce needs -dir and -out")
	}
	ids, version, err := ptxgen.ReadBatch(*dir)
	if err != nil {
		return err
	}
	recs, err := readGlob(*results)
	if err != nil {
		return err
	}
	reduced := make([]ptxgen.Record, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				rec, ok := recs[ids[i]]
				if !ok {
					errs[i] = fmt.Errorf("seed %d: no result from the device", ids[i])
					continue
				}
				tr := ptxgen.GenerateWith(ids[i], ptxgen.Options{Version: version}).Trace()
				reduced[i], errs[i] = ptxgen.ReduceTrace(context.Background(), tr, rec, *keep, *budget)
			}
		}()
	}
	for i := range ids {
		next <- i
	}
	close(next)
	wg.Wait()
	f, err := os.Create(*outPath)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	bad := 0
	for i, r := range reduced {
		if errs[i] != nil {
			bad++
			fmt.Fprintln(os.Stderr, "tracereduce:", errs[i])
			continue
		}
		if err := ptxgen.WriteRecord(w, r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("tracereduce: %d kernels, %d without a usable trace\n", len(ids), bad)
	if bad == len(ids) {
		return fmt.Errorf("no kernel of %s has a usable trace", *dir)
	}
	return nil
}

// trace compares device traces (tracereduce's file) with the emulator
// and reports, per kernel, the first instruction whose result differs,
// with its operands, and how often each opcode comes first.
func trace(args []string) error {
	fs := flag.NewFlagSet("trace", flag.ExitOnError)
	traces := fs.String("traces", "", "device traces written by tracereduce (.gz too)")
	seed := fs.Uint64("seed", 0, "only this seed")
	per := fs.Int("threads", 1, "differences shown per kernel (earliest first)")
	corpusPath := fs.String("corpus", "", "the corpus of the plain kernels, to tell where instrumenting changed the device's outputs")
	fs.Parse(args)
	recs, err := ptxgen.ReadResultFiles(*traces)
	if err != nil {
		return err
	}
	plain := map[uint64]string{}
	if *corpusPath != "" {
		c, err := ptxgen.ReadCorpus(*corpusPath)
		if err != nil {
			return err
		}
		for _, e := range c.Entries {
			plain[e.Seed] = e.Hash
		}
	}
	outsDiffer := 0
	var seeds []uint64
	for s := range recs {
		if *seed == 0 || s == *seed {
			seeds = append(seeds, s)
		}
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	if len(seeds) == 0 {
		return fmt.Errorf("%s holds no trace of seed %d", *traces, *seed)
	}
	reports := make([]*ptxgen.TraceReport, len(seeds))
	devOut := make([]string, len(seeds))
	errs := make([]error, len(seeds))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				dt, err := ptxgen.DecodeDeviceTrace(recs[seeds[i]])
				if err != nil {
					errs[i] = err
					continue
				}
				devOut[i] = dt.OutDigest
				reports[i], errs[i] = ptxgen.CompareTrace(context.Background(), dt)
			}
		}()
	}
	for i := range seeds {
		next <- i
	}
	close(next)
	wg.Wait()
	byOp := map[string][]uint64{}
	same, failed := 0, 0
	for i, r := range reports {
		if errs[i] != nil {
			failed++
			fmt.Printf("seed %d: %v\n", seeds[i], errs[i])
			continue
		}
		if h, ok := plain[r.Seed]; ok && r.Err == "" && h != "" && h != devOut[i] {
			outsDiffer++
			fmt.Printf("seed %d: instrumented, the kernel's exact outputs on the device are not the plain kernel's (ptxas compiled it otherwise)\n", r.Seed)
		}
		switch {
		case r.Err != "":
			fmt.Printf("seed %d: the device failed: %s\n", r.Seed, r.Err)
			byOp["(device error)"] = append(byOp["(device error)"], r.Seed)
			continue
		case r.EmuErr != "":
			fmt.Printf("seed %d: the emulator failed: %s\n", r.Seed, r.EmuErr)
			byOp["(emulator error)"] = append(byOp["(emulator error)"], r.Seed)
			continue
		case r.Differ == 0:
			same++
			if !r.OutsMatch {
				fmt.Printf("seed %d: every trace matches, yet the exact outputs differ (the accumulators?)\n", r.Seed)
				byOp["(outputs only)"] = append(byOp["(outputs only)"], r.Seed)
			}
			continue
		}
		fmt.Printf("seed %d: %d of %d threads' traces differ", r.Seed, r.Differ, r.Threads)
		if r.Unknown > 0 {
			fmt.Printf(" (%d not kept by the device record)", r.Unknown)
		}
		fmt.Println()
		for j, d := range r.Diffs {
			if j == *per {
				break
			}
			fmt.Printf("    %s\n", d)
		}
		op := r.Opcode()
		if op == "" {
			op = "(threads not kept)"
		}
		byOp[op] = append(byOp[op], r.Seed)
	}
	var ops []string
	for op := range byOp {
		ops = append(ops, op)
	}
	sort.Slice(ops, func(i, j int) bool {
		return len(byOp[ops[i]]) > len(byOp[ops[j]]) || len(byOp[ops[i]]) == len(byOp[ops[j]]) && ops[i] < ops[j]
	})
	if *corpusPath != "" {
		fmt.Printf("\n%d kernels computed otherwise on the device once instrumented\n", outsDiffer)
	}
	fmt.Printf("\n%d kernels: %d with every trace the device's, %d unreadable; the first differing instruction, by opcode:\n", len(seeds), same, failed)
	for _, op := range ops {
		ss := byOp[op]
		var list []string
		for i, s := range ss {
			if i == 8 {
				list = append(list, "...")
				break
			}
			list = append(list, fmt.Sprint(s))
		}
		fmt.Printf("%6d %s (seeds %s)\n", len(ss), op, strings.Join(list, " "))
	}
	return nil
}

// bisect reads gpurun's run of a prefix batch (batch -prefixes), which
// stops at the first prefix that fails, and says which statement of each
// seed first makes the kernel fail, and what the emulator does with it.
func bisect(args []string) error {
	fs := flag.NewFlagSet("bisect", flag.ExitOnError)
	dir := fs.String("dir", "", "the prefix batch's directory")
	results := fs.String("results", "", "gpurun result files of the batch (a glob)")
	fs.Parse(args)
	ids, version, err := ptxgen.ReadBatch(*dir)
	if err != nil {
		return err
	}
	recs, err := readGlob(*results)
	if err != nil {
		return err
	}
	type state struct {
		lastOK, failed int
		err            string
		// differs is the first prefix that ran on the device with exact
		// outputs other than the emulator's, and diffs its slots; refused
		// the first the emulator refuses.
		differs, refused int
		diffs            []ptxgen.SlotDiff
		why              string
	}
	per := map[uint64]*state{}
	var order []uint64
	ctx := context.Background()
	for _, id := range ids {
		seed, k, ok := ptxgen.SplitPrefixID(id)
		if !ok {
			return fmt.Errorf("%s: kernel %d is not a prefix (batch -prefixes writes them)", *dir, id)
		}
		st := per[seed]
		if st == nil {
			st = &state{}
			per[seed] = st
			order = append(order, seed)
		}
		r, ran := recs[id]
		switch {
		case !ran || st.failed != 0:
		case r.Status == 0:
			st.lastOK = k
			if st.differs != 0 || st.refused != 0 {
				break
			}
			// The prefix ran: compare its outputs with the emulator's.
			p := ptxgen.GenerateWith(seed, ptxgen.Options{Version: version, MaxStmts: k})
			out, _, err := ptxgen.RunEmulator(ctx, p, 1)
			switch {
			case err != nil:
				st.refused, st.why = k, err.Error()
			case len(r.Data) < len(out):
				return fmt.Errorf("prefix %d of seed %d: the device's record holds %d bytes, the outputs %d", k, seed, len(r.Data), len(out))
			case ptxgen.Digest(out) != ptxgen.Digest(r.Data[:len(out)]):
				st.differs, st.diffs = k, ptxgen.DiffSlots(p, out, r.Data[:len(out)])
			}
		default:
			st.failed, st.err = k, strings.SplitN(string(r.Data), "\n", 2)[0]
		}
	}
	for _, seed := range order {
		st := per[seed]
		full := ptxgen.GenerateWith(seed, ptxgen.Options{Version: version})
		switch {
		case st.differs != 0:
			// Every register a prefix wrote is stored at its end, so the
			// statement added last is the first whose results, or whose
			// effect on earlier results, the device computes otherwise.
			fmt.Printf("seed %d: the first %d statements give the emulator's outputs on the device; with statement %d they differ:\n%s",
				seed, st.differs-1, st.differs, full.StmtText(st.differs))
			for i, d := range st.diffs {
				if i == 8 {
					fmt.Printf("  ... %d slots differ\n", len(st.diffs))
					break
				}
				fmt.Printf("  thread %d %s (last written by `%s`): emulator %#x device %#x\n", d.Thread, d.Slot.Reg, d.Slot.Last, d.Emu, d.Dev)
			}
		case st.refused != 0:
			fmt.Printf("seed %d: the emulator refuses the first %d statements (%s); the device's outputs agreed before\n", seed, st.refused, st.why)
		}
		if st.failed == 0 {
			fmt.Printf("seed %d: every prefix that ran (up to %d of %d statements) ran without error\n", seed, st.lastOK, full.Stmts())
			continue
		}
		fmt.Printf("seed %d: the first %d statements run; adding statement %d fails on the device with %s:\n%s",
			seed, st.lastOK, st.failed, st.err, full.StmtText(st.failed))
		p := ptxgen.GenerateWith(seed, ptxgen.Options{Version: version, MaxStmts: st.failed})
		if _, _, err := ptxgen.RunEmulator(ctx, p, 1); err != nil {
			fmt.Printf("  the emulator fails too: %v\n", err)
		} else {
			fmt.Printf("  the emulator runs that prefix without error\n")
		}
	}
	return nil
}
