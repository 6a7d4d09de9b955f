package precopy_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate/precopy"
	"github.com/gpuctl/gpuctl/migrate/stage"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/store"
)

// worker is a session's worker as the rounds see it: an emulated device
// and its tracker, read between no requests at all.
type worker struct {
	dev *emulated.Device
	tr  *devmem.Tracker
}

func (w *worker) PrecopyMem(ctx context.Context, req devmem.PrecopyRequest) (*os.File, devmem.Saved, error) {
	return w.tr.Precopy(ctx, w.dev, func(f func()) { f() }, req)
}

// freeze has the worker save as a migration's freeze does, and opens it.
func (w *worker) freeze(t *testing.T, req devmem.SaveRequest) *devstore.Snapshot {
	t.Helper()
	f, sv, err := w.tr.Save(context.Background(), w.dev, req)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := devstore.Open(f, sv)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// newWorker has allocations of random data (6 MiB), and one of zeros.
func newWorker(t *testing.T) (*worker, backend.Ctx, []backend.DevPtr) {
	t.Helper()
	ctx := context.Background()
	d := emulated.New(emulated.Config{MemBytes: 64 << 20})
	t.Cleanup(func() { d.Close() })
	c, err := d.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var ptrs []backend.DevPtr
	for _, n := range []uint64{4<<20 + 512, 2 << 20, 1 << 20} {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
		if n == 1<<20 {
			continue
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(b), n, 0); err != nil {
			t.Fatal(err)
		}
	}
	return &worker{dev: d, tr: devmem.NewTracker()}, c, ptrs
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// target is a second host's chunk routes on its own store, staging what
// it receives for a restore.
func target(t *testing.T, st *store.Store) (*control.Client, *httptest.Server) {
	cl, srv, _ := stagingTarget(t, st)
	return cl, srv
}

func stagingTarget(t *testing.T, st *store.Store) (*control.Client, *httptest.Server, *stage.Stager) {
	return stagingTargetMax(t, st, 1<<30, nil)
}

// stagingTargetMax is stagingTarget with a staging bound, counting the
// chunk streams it receives in puts when that is set.
func stagingTargetMax(t *testing.T, st *store.Store, max int64, puts *atomic.Int64) (*control.Client, *httptest.Server, *stage.Stager) {
	t.Helper()
	mux := http.NewServeMux()
	sg := &stage.Stager{Store: st, Max: max}
	images.Register(mux, st, images.RouteOptions{Logger: slog.New(slog.DiscardHandler), Stage: sg.Keep, StageMemory: sg.KeepMemory})
	sg.Register(mux)
	var h http.Handler = mux
	if puts != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && r.URL.Path == "/v1/chunks" {
				puts.Add(1)
			}
			mux.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(control.RequireToken("tok", h))
	t.Cleanup(srv.Close)
	return control.NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok"), srv, sg
}

// digests are the stored chunks a table lists.
func digests(tab *devstore.Table) []store.Digest {
	var out []store.Digest
	for _, c := range tab.Chunks {
		if !c.Zero {
			out = append(out, c.Digest)
		}
	}
	return out
}

// TestRounds: an idle session converges in two rounds, the target then
// holds every block, and the freeze relative to the last round copies
// only what changed since, which the staged table completes into an image;
// the changed block is sent ahead during the freeze, so the target's
// staging holds the whole image.
func TestRounds(t *testing.T) {
	ctx := context.Background()
	w, c, ptrs := newWorker(t)
	stA, stB := openStore(t), openStore(t)
	cl, _, sg := stagingTarget(t, stB)
	cp := &precopy.Copier{Store: stA, Target: cl, Session: "s-000000000001", Policy: precopy.Policy{SmallBytes: 1}}
	defer cp.Close(ctx)
	rounds, err := cp.Run(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 2 || rounds[0].Blocks != 8 || rounds[0].Bytes != 7<<20+512 || rounds[1].Blocks != 0 {
		t.Fatalf("rounds of an idle session: %+v; want all 8 blocks, then none", rounds)
	}
	if rounds[0].SentBytes <= 0 || rounds[1].SentBytes != 0 {
		t.Errorf("rounds sent %d then %d bytes", rounds[0].SentBytes, rounds[1].SentBytes)
	}
	base := cp.Base()
	ds := digests(base)
	if len(ds) != 7 { // 4 MiB + 512 B (5 blocks) and 2 MiB of random data; the zero block is no chunk
		t.Fatalf("staged %d chunks, want 7", len(ds))
	}
	if missing, err := stB.Missing(ctx, ds); err != nil || len(missing) != 0 {
		t.Fatalf("the target lacks %d staged chunks (%v)", len(missing), err)
	}
	// The client writes one byte; the freeze copies that block only, and
	// the staged chunks make the image whole.
	if err := w.dev.MemcpyHtoD(ctx, c, ptrs[1]+5, bytes.NewReader([]byte{9}), 1, 0); err != nil {
		t.Fatal(err)
	}
	snap := w.freeze(t, devmem.SaveRequest{Base: base.Gen(), Release: true})
	defer snap.Close()
	sv := snap.Saved
	if sv.SentBytes != 1<<20 || snap.Layout.SentCount() != 1 {
		t.Fatalf("freeze after pre-copy copied %d blocks (%d bytes); want the one written", snap.Layout.SentCount(), sv.SentBytes)
	}
	// Before the freeze's save is sent, the target's table is the last
	// round's.
	if g := cp.StagedGen()(); g != base.Gen() {
		t.Errorf("StagedGen before Last: %x, want the last round's %x", g, base.Gen())
	}
	// The changed block goes to the target while the freeze goes on;
	// StagedGen asked after Last waits for it and names the save.
	cp.Last(ctx, snap)
	gen := cp.StagedGen()
	if g := gen(); g != snap.Layout.Gen || g == base.Gen() {
		t.Errorf("StagedGen after Last: %x, want the freeze's save %x", g, snap.Layout.Gen)
	}
	if sent, err := cp.WaitLast(); sent <= 0 || err != nil {
		t.Errorf("the freeze's changed block was not sent ahead (%d bytes)", sent)
	}
	files, err := devstore.Files(snap, base)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := images.CommitWith(ctx, stA, t.TempDir(), images.Meta{ID: "i-precopy", Session: "s-000000000001", Backend: "emulated"}, files)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := devstore.FromManifest(ctx, stA, m)
	if err != nil {
		t.Fatal(err)
	}
	// The target staged every chunk the rounds sent; its restore takes
	// all but the block written after them from memory.
	g := sg.Take("s-000000000001")
	if tg := g.Table().Gen(); tg != snap.Layout.Gen {
		t.Errorf("the target's staged table is of save %x, StagedGen said %x", tg, snap.Layout.Gen)
	}
	if blocks, n, b, _ := g.Stats(); blocks != 8 || n != 0 || b != 7<<20+512 {
		t.Fatalf("the target staged %d blocks and %d chunks, %d bytes; want 8, 0, %d", blocks, n, b, 7<<20+512)
	}
	if missing, err := stB.Missing(ctx, digests(tab)); err != nil || len(missing) != 0 {
		t.Errorf("before any push the target lacks %d of the image's chunks (%v)", len(missing), err)
	}
	back, hits, err := g.Load(ctx, stA, tab)
	g.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if hits != 8 {
		t.Errorf("%d blocks came from the staging, want all 8 (the changed one sent ahead)", hits)
	}
	if sg.Used() != 0 {
		t.Errorf("%d bytes still staged after the restore released them", sg.Used())
	}
	if err := w.tr.Reload(ctx, w.dev, back.File, back.Saved.LayoutOff, back.Saved.LayoutLen); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := w.dev.MemcpyDtoH(ctx, c, &got, ptrs[1]+5, 1, 0); err != nil || !bytes.Equal(got.Bytes(), []byte{9}) {
		t.Fatalf("the image restored byte %v (%v), want 9", got.Bytes(), err)
	}
}

// TestUnstage: a migration that fails after its rounds has the target
// drop what they staged.
func TestUnstage(t *testing.T) {
	ctx := context.Background()
	w, _, _ := newWorker(t)
	stA, stB := openStore(t), openStore(t)
	cl, _, sg := stagingTarget(t, stB)
	cp := &precopy.Copier{Store: stA, Target: cl, Session: "s-000000000003", Policy: precopy.Policy{SmallBytes: 1}}
	defer cp.Close(ctx)
	if _, err := cp.Run(ctx, w); err != nil {
		t.Fatal(err)
	}
	if sg.Used() != 7<<20+512 {
		t.Fatalf("the target staged %d bytes, want %d", sg.Used(), 7<<20+512)
	}
	cp.Unstage(ctx)
	if sg.Used() != 0 || sg.Take("s-000000000003") != nil {
		t.Errorf("the target kept %d staged bytes after the source dropped them", sg.Used())
	}
}

// TestFaults: a target that dies between rounds and a store write that
// fails (a full disk) each fail the pre-copy with an error naming the
// session and the round, and once it is closed gc leaves nothing of it
// in this host's store.
func TestFaults(t *testing.T) {
	const id = "s-000000000002"
	cases := []struct {
		name  string
		point string
		hook  func(srv *httptest.Server) failpoint.Hook
		want  []string
		kind  errs.Kind
	}{
		{name: "target dies mid-pre-copy", point: "precopy/round", want: []string{id, "pre-copy round 2"},
			hook: func(srv *httptest.Server) failpoint.Hook {
				n := 0
				return func(context.Context) error {
					if n++; n == 2 {
						srv.CloseClientConnections()
						srv.Close()
					}
					return nil
				}
			}},
		{name: "disk full", point: "precopy/store", want: []string{id, "pre-copy round 1", "no space left"}, kind: errs.ResourceExhausted,
			hook: func(*httptest.Server) failpoint.Hook {
				return func(context.Context) error {
					return errs.New(errs.ResourceExhausted, "", "write pack: no space left on device")
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, c, ptrs := newWorker(t)
			stA, stB := openStore(t), openStore(t)
			cl, srv := target(t, stB)
			fp := &failpoint.Set{}
			fp.On(tc.point, tc.hook(srv))
			ctx := failpoint.With(context.Background(), fp)
			// The session writes between rounds, so round 2 has work.
			w2 := &writer{worker: w, c: c, p: ptrs[0]}
			cp := &precopy.Copier{Store: stA, Target: cl, Session: id, Policy: precopy.Policy{SmallBytes: 1}}
			_, err := cp.Run(ctx, w2)
			if err == nil {
				t.Fatal("pre-copy succeeded")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tc.kind != "" && errs.KindOf(err) != tc.kind {
				t.Errorf("error kind %s, want %s", errs.KindOf(err), tc.kind)
			}
			var staged []store.Digest
			if b := cp.Base(); b != nil {
				staged = digests(b)
			}
			cp.Close(context.Background())
			if _, err := stA.GC(context.Background()); err != nil {
				t.Fatal(err)
			}
			if missing, _ := stA.Missing(context.Background(), staged); len(missing) != len(staged) {
				t.Errorf("gc kept %d of the %d chunks a failed pre-copy staged", len(staged)-len(missing), len(staged))
			}
			for _, st := range []*store.Store{stA, stB} {
				if err := st.Check(context.Background()); err != nil {
					t.Errorf("store after a failed pre-copy: %v", err)
				}
			}
			if fp.Hits(tc.point) == 0 {
				t.Errorf("failpoint %s never reached", tc.point)
			}
		})
	}
}

// writer changes a block of the session after each round.
type writer struct {
	*worker
	c backend.Ctx
	p backend.DevPtr
	n byte
}

func (w *writer) PrecopyMem(ctx context.Context, req devmem.PrecopyRequest) (*os.File, devmem.Saved, error) {
	f, sv, err := w.worker.PrecopyMem(ctx, req)
	w.n++
	_ = w.dev.MemcpyHtoD(context.Background(), w.c, w.p, io.LimitReader(bytes.NewReader(bytes.Repeat([]byte{w.n}, 64<<10)), 64<<10), 64<<10, 0)
	return f, sv, err
}

// TestMemoryRounds: a memory pre-copy stores nothing on either host, the
// target stages every block (sent in several streams), and the freeze's
// save into this host's mirror (copying only the block written after the
// rounds) is a complete save, the device memory as it is, that stores as a
// self-contained image; the target's staging alone restores it.
func TestMemoryRounds(t *testing.T) {
	ctx := context.Background()
	w, c, ptrs := newWorker(t)
	stA, stB := openStore(t), openStore(t)
	var puts atomic.Int64
	cl, _, sg := stagingTargetMax(t, stB, 1<<30, &puts)
	const id = "s-000000000005"
	// The first round's 7 MiB go in three streams of at least 2 MiB.
	defer precopy.SetShardMin(2 << 20)()
	cp := &precopy.Copier{Store: stA, Target: cl, Session: id, Policy: precopy.Policy{SmallBytes: 1}, Memory: true, Streams: 4}
	defer cp.Close(ctx)
	if _, err := cp.Run(ctx, w); err != nil {
		t.Fatal(err)
	}
	if !cp.InMemory() {
		t.Fatal("a target with room staged the rounds through the stores")
	}
	if n := puts.Load(); n != 3 {
		t.Errorf("the first round went in %d chunk streams, want 3 (7 MiB, at least 2 MiB each, at most 4)", n)
	}
	base := cp.Base()
	ds := digests(base)
	for name, st := range map[string]*store.Store{"source": stA, "target": stB} {
		if missing, err := st.Missing(ctx, ds); err != nil || len(missing) != len(ds) {
			t.Errorf("the %s's store holds %d of the %d pre-copied chunks (%v), want none", name, len(ds)-len(missing), len(ds), err)
		}
	}
	if err := w.dev.MemcpyHtoD(ctx, c, ptrs[0]+7, bytes.NewReader([]byte{42}), 1, 0); err != nil {
		t.Fatal(err)
	}
	want := readAll(t, w, c, ptrs)
	// The freeze saves into the mirror: it copies the one block written
	// and comes out complete.
	into, gen := cp.Mirror()
	if into == nil || gen != base.Gen() {
		t.Fatalf("mirror of round %x, want the last round %x", gen, base.Gen())
	}
	// In process, the tracker answers with into itself (a worker sends a
	// descriptor of its own): the snapshot takes it.
	snap := w.freeze(t, devmem.SaveRequest{Base: base.Gen(), Release: true, Into: into, Mirror: gen})
	defer snap.Close()
	sv := snap.Saved
	if sv.CopiedBytes != 1<<20 || snap.Layout.SentCount() != snap.Layout.Blocks {
		t.Fatalf("the freeze into the mirror copied %d bytes and holds %d of %d blocks; want the one block written, and all", sv.CopiedBytes, snap.Layout.SentCount(), snap.Layout.Blocks)
	}
	cp.Last(ctx, snap)
	if g := cp.StagedGen()(); g != snap.Layout.Gen {
		t.Errorf("StagedGen after Last: %x, want the freeze's save %x", g, snap.Layout.Gen)
	}
	if n, err := cp.WaitLast(); err != nil || n <= 0 || n > 2<<20 {
		t.Fatalf("the freeze sent %d bytes ahead (%v); want the one block it changed, not the unchanged ones its save holds", n, err)
	}
	if err := cp.MemComplete(snap); err != nil {
		t.Fatal(err)
	}
	if n := snap.Layout.SentCount(); n != snap.Layout.Blocks {
		t.Fatalf("the completed save holds %d of %d blocks", n, snap.Layout.Blocks)
	}
	// The completed save is the device memory, block for block.
	if err := w.tr.Reload(ctx, w.dev, snap.File, snap.Saved.LayoutOff, snap.Saved.LayoutLen); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, w, c, ptrs); !bytes.Equal(got, want) {
		t.Fatal("the save completed from the mirror reloads other bytes than the device held")
	}
	files, err := devstore.FilesAll(snap)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := images.CommitWith(ctx, stA, t.TempDir(), images.Meta{ID: "i-memory", Session: id, Backend: "emulated"}, files)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := devstore.FromManifest(ctx, stA, m)
	if err != nil {
		t.Fatal(err)
	}
	if missing, err := stA.Missing(ctx, digests(tab)); err != nil || len(missing) != 0 {
		t.Fatalf("the image lacks %d chunks in its own store (%v)", len(missing), err)
	}
	// The target restores from its staging alone: its store is empty.
	g := sg.Take(id)
	// The image's table is the staged one, chunk for chunk (zero blocks
	// too): the target takes the image as the session's base by it
	// (restore.Restorer.CommitAdopted).
	if st := g.Table(); !devstore.SameBlocks(st.Layout, tab.Layout) || !slices.Equal(st.Chunks, tab.Chunks) {
		t.Error("the image's device-memory table differs from the one the target staged")
	}
	back, hits, err := g.Load(ctx, stB, g.Table())
	g.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if hits != snap.Layout.Blocks {
		t.Errorf("%d of %d blocks came from the staging", hits, snap.Layout.Blocks)
	}
	if !bytes.Equal(back.Data, snap.Data) {
		t.Error("the target's staging holds other bytes than the freeze's completed save")
	}
}

// TestMemoryRefused: a target whose staging bound the session passes
// refuses a memory pre-copy, which then goes through both stores; chunks
// sent for memory staging that nothing laid out are refused.
func TestMemoryRefused(t *testing.T) {
	ctx := context.Background()
	w, _, _ := newWorker(t)
	stA, stB := openStore(t), openStore(t)
	cl, _, _ := stagingTargetMax(t, stB, 1<<20, nil)
	cp := &precopy.Copier{Store: stA, Target: cl, Session: "s-000000000006", Policy: precopy.Policy{SmallBytes: 1}, Memory: true}
	defer cp.Close(ctx)
	if _, err := cp.Run(ctx, w); err != nil {
		t.Fatal(err)
	}
	if cp.InMemory() {
		t.Fatal("a target without room took a memory pre-copy")
	}
	if missing, err := stB.Missing(ctx, digests(cp.Base())); err != nil || len(missing) != 0 {
		t.Errorf("the durable rounds left %d chunks out of the target's store (%v)", len(missing), err)
	}
	var buf bytes.Buffer
	b := []byte("x")
	if _, err := images.WriteRawChunks(ctx, []store.Digest{store.Sum(b)}, [][]byte{b}, &buf); err != nil {
		t.Fatal(err)
	}
	_, err := cl.PutChunksStaged(ctx, "s-000000000007", &buf, true)
	if errs.KindOf(err) != errs.FailedPrecondition || !strings.Contains(err.Error(), "s-000000000007") {
		t.Errorf("memory chunks for a session with no staging: %v, want a failed precondition naming it", err)
	}
}

// readAll reads the worker's three allocations back.
func readAll(t *testing.T, w *worker, c backend.Ctx, ptrs []backend.DevPtr) []byte {
	t.Helper()
	var out bytes.Buffer
	for i, n := range []uint64{4<<20 + 512, 2 << 20, 1 << 20} {
		if err := w.dev.MemcpyDtoH(context.Background(), c, &out, ptrs[i], n, 0); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}
