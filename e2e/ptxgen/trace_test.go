package ptxgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestDestRegs(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"add.s32 %r1, %r2, %r3", []string{"%r1"}},
		{"@!%p2 cvt.rn.f32.s16 %f3, %h1", []string{"%f3"}},
		{"setp.lt.and.s32 %p4|%p5, %r1, 7, %p2", []string{"%p4", "%p5"}},
		{"mov.b64 {%r5, %r6}, %rd8", []string{"%r5", "%r6"}},
		{"mov.b32 %r7, {%h1, %h2}", []string{"%r7"}},
		{"ld.global.v4.u8 {%h1, %h2, %h3, %h4}, [%rd0+4]", []string{"%h1", "%h2", "%h3", "%h4"}},
		{"ld.param.b32 %r27, [qr]", []string{"%r27"}},
		{"atom.global.add.u32 %r3, [%rd6+0], %r1", []string{"%r3"}},
		{"shfl.sync.up.b32 %r2|%p1, %r3, 1, 0, 0xffffffff", []string{"%r2", "%p1"}},
		{"bar.red.popc.u32 %r9, 0, %p3", []string{"%r9"}},
		{"st.global.b32 [%rd3+4], %r1", nil},
		{"red.global.add.u32 [%rd4+0], %r1", nil},
		{"@%p1 bra $L3", nil},
		{"bar.sync 0", nil},
		{"barrier.sync 0", nil},
		{"call (qr), h0, (qa, qb)", nil},
		{".param .b32 qa", nil},
		{"{", nil},
		{"}", nil},
		{"$L2:", nil},
		{"ret", nil},
	} {
		if got := destRegs(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("destRegs(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestTraceInstrumented: an instrumented kernel computes exactly what the
// plain one does, every thread's trace fits its region, and the labelling
// kernel writes as many entries, each naming a traced result.
func TestTraceInstrumented(t *testing.T) {
	ctx := context.Background()
	seeds := []Options{{Version: 1}, {Version: 2}}
	for s := uint64(1); s <= 40; s++ {
		for _, o := range seeds {
			p := GenerateWith(s, o)
			tr := p.Trace()
			plain, _, err := RunEmulator(ctx, p, 1)
			if refused(err) {
				continue
			}
			if err != nil {
				t.Fatalf("seed %d v%d: %v", s, o.Version, err)
			}
			out, vals, err := tr.RunTrace(ctx)
			if err != nil {
				t.Fatalf("seed %d v%d traced: %v", s, o.Version, err)
			}
			if !bytes.Equal(out, plain) {
				t.Errorf("seed %d v%d: the instrumented kernel's outputs differ from the plain one's", s, o.Version)
			}
			ids, err := tr.runIDs(ctx)
			if err != nil {
				t.Fatalf("seed %d v%d labels: %v", s, o.Version, err)
			}
			for th := range vals {
				if len(vals[th]) == 0 || len(vals[th]) != len(ids[th]) {
					t.Fatalf("seed %d v%d thread %d: %d values, %d labels", s, o.Version, th, len(vals[th]), len(ids[th]))
				}
				for _, id := range ids[th] {
					pt, r := int(id>>3), int(id&7)
					if pt >= len(tr.Points) || r >= len(tr.Points[pt].Dests) {
						t.Fatalf("seed %d v%d thread %d: label %#x names no traced result", s, o.Version, th, id)
					}
				}
			}
		}
	}
}

// TestTraceNoAddresses: a trace records no address, which would differ
// between devices: buffers placed elsewhere give the same traces.
func TestTraceNoAddresses(t *testing.T) {
seeds:
	for s := uint64(1); s <= 40; s++ {
		tr := Generate(s).Trace()
		var traces [2][]byte
		for i, start := range []uint64{0x7f00_0000_0000, 0x1234_5670_0000} {
			traces[i] = make([]byte, tr.Len())
			_, _, err := runKernelAt(context.Background(), tr.Program, tr.PTX, traces[i], 1, start)
			if refused(err) {
				continue seeds
			}
			if err != nil {
				t.Fatalf("seed %d: %v", s, err)
			}
		}
		if !bytes.Equal(traces[0], traces[1]) {
			t.Fatalf("seed %d: the trace depends on where the buffers are", s)
		}
	}
}

// gpurunTraceRecord is what gpurun records for tr's kernel, made from the
// emulator's run, with edit applied to the threads' entries.
func gpurunTraceRecord(t *testing.T, tr *Trace, edit func([][]uint64)) Record {
	t.Helper()
	buf := make([]byte, tr.Len())
	out, approx, err := runKernel(context.Background(), tr.Program, tr.PTX, buf, 1)
	if err != nil {
		t.Fatal(err)
	}
	threads, err := tr.splitTrace(buf)
	if err != nil {
		t.Fatal(err)
	}
	edit(threads)
	data := append(append([]byte(nil), out...), approx...)
	for _, es := range threads {
		data = binary.LittleEndian.AppendUint32(data, uint32(len(es)))
		for _, e := range es {
			data = binary.LittleEndian.AppendUint64(data, e)
		}
	}
	return Record{Seed: tr.Program.Seed, Data: data}
}

// TestTraceCompare: a device trace equal to the emulator's reports no
// difference; one changed entry is found in its thread at its index, with
// the instruction, its operands and the verdict of re-running it alone;
// a thread the record did not keep counts as differing, unknown where.
func TestTraceCompare(t *testing.T) {
	ctx := context.Background()
	tr := GenerateWith(3, Options{Version: 2}).Trace()
	// Find, in thread 5, an entry written by a plain register
	// instruction (an xor, and, or or add of registers).
	ids, err := tr.runIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := -1
	for i, id := range ids[5] {
		text := tr.Points[id>>3].Text
		op, rest, _ := strings.Cut(text, " ")
		if base, _, _ := strings.Cut(op, "."); (base == "xor" || base == "and" || base == "or" || base == "add" || base == "mul") &&
			!strings.Contains(op, "cc") && !strings.HasPrefix(rest, "%p") && strings.Count(rest, "%") == 3 && i > 20 {
			at = i
			break
		}
	}
	if at < 0 {
		t.Fatal("seed 3 has no plain register instruction in thread 5 to change")
	}
	for _, tc := range []struct {
		name   string
		edit   func([][]uint64)
		keep   int
		differ int
	}{
		{"unchanged", func([][]uint64) {}, 4, 0},
		{"one entry changed", func(th [][]uint64) { th[5][at] ^= 0x10 }, 4, 1},
		{"a trace cut short", func(th [][]uint64) { th[7] = th[7][:at] }, 4, 1},
		{"two threads, one kept", func(th [][]uint64) { th[5][at] ^= 0x10; th[9][at+3] ^= 1 }, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, err := ReduceTrace(ctx, tr, gpurunTraceRecord(t, tr, tc.edit), tc.keep, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			dt, err := DecodeDeviceTrace(rec)
			if err != nil {
				t.Fatal(err)
			}
			r, err := CompareTrace(ctx, dt)
			if err != nil {
				t.Fatal(err)
			}
			if r.Differ != tc.differ || !r.OutsMatch {
				t.Fatalf("%d threads differ (%d unknown), outputs match %v; want %d, true", r.Differ, r.Unknown, r.OutsMatch, tc.differ)
			}
			if tc.differ == 0 {
				return
			}
			d := r.Diffs[0]
			switch tc.name {
			case "a trace cut short":
				if d.Thread != 7 || d.Index != at || !d.DevEnd {
					t.Fatalf("got %s; want thread 7 entry %d, the device's trace ending", d, at)
				}
				return
			case "two threads, one kept":
				if len(r.Diffs) != 1 || r.Unknown != 1 {
					t.Fatalf("%d differences kept, %d unknown; want 1 and 1", len(r.Diffs), r.Unknown)
				}
			}
			if d.Thread != 5 || d.Index != at || d.Dev != d.Emu^0x10 {
				t.Fatalf("got %s; want thread 5 entry %d", d, at)
			}
			if d.Text != tr.Points[ids[5][at]>>3].Text || len(d.Operands) != 2 || strings.Contains(strings.Join(d.Operands, " "), "?") {
				t.Errorf("got %s; want the instruction %q with its two operands' values", d, tr.Points[ids[5][at]>>3].Text)
			}
			if !strings.Contains(d.Alone, "computes this instruction differently") {
				t.Errorf("verdict %q; want the instruction blamed", d.Alone)
			}
		})
	}
}

// TestPrefixes: a prefix program is the full program's first statements.
func TestPrefixes(t *testing.T) {
	for s := uint64(1); s <= 20; s++ {
		full := Generate(s)
		n := full.Stmts()
		if n < 30 || n >= 90 {
			t.Fatalf("seed %d has %d statements", s, n)
		}
		for _, k := range []int{1, n / 2, n - 1} {
			p := GenerateWith(s, Options{MaxStmts: k})
			// (Only the layout of the outputs, in the prologue, differs.)
			if p.Stmts() != k || !bytes.Equal(p.In, full.In) {
				t.Fatalf("seed %d: the prefix of %d statements has %d", s, k, p.Stmts())
			}
			for i := 1; i <= k; i++ {
				if p.StmtText(i) != full.StmtText(i) {
					t.Fatalf("seed %d: statement %d of the prefix of %d is not the full program's", s, i, k)
				}
			}
			if full.StmtText(k) == "" {
				t.Fatalf("seed %d: statement %d has no text", s, k)
			}
		}
		id := PrefixID(s, n)
		if got, k, ok := SplitPrefixID(id); !ok || got != s || k != n {
			t.Fatalf("PrefixID(%d, %d) = %#x splits into %d, %d, %v", s, n, id, got, k, ok)
		}
	}
	if _, _, ok := SplitPrefixID(1234); ok {
		t.Fatal("a plain seed splits as a prefix")
	}
}

// TestVersions: version 1 programs still generate (the corpus recorded
// with them replays), version 2 guards no carry-chain instruction, and
// an unknown version is refused.
func TestVersions(t *testing.T) {
	guarded := func(p *Program) int {
		n := 0
		for _, l := range strings.Split(p.PTX, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "@") && (strings.Contains(l, ".cc") || strings.Contains(l, "addc") || strings.Contains(l, "subc") || strings.Contains(l, "madc")) {
				n++
			}
		}
		return n
	}
	v1, v2 := 0, 0
	for s := uint64(1); s <= 300; s++ {
		v1 += guarded(GenerateWith(s, Options{Version: 1}))
		v2 += guarded(GenerateWith(s, Options{Version: 2}))
	}
	if v1 == 0 || v2 != 0 {
		t.Fatalf("guarded carry-chain instructions: %d in version 1, %d in version 2; want some, none", v1, v2)
	}
	if err := CheckVersion(Version + 1); err == nil {
		t.Fatal("a version past Version is accepted")
	}
}
