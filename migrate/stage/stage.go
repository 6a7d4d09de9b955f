// Package stage is a migration target's staging of device memory, so
// that the restore after the freeze does not read and decode the whole
// image out of the store while the client waits.
//
// Each pre-copy round, the source first sends the round's table (the
// layout of the session's device memory and the chunk of every block:
// PUT /v1/chunks/staged/{id}), then the chunks the target lacks (PUT
// /v1/chunks?stage=SESSION), which the target checks and decodes anyway.
// The stager keeps a memory file laid out as the table says and writes
// each arriving chunk straight into the blocks that hold it; blocks whose
// chunk the target's store already had are read from the store in the
// background. At the restore, the image's table is compared with what the
// file holds block by block: only the blocks the freeze changed are read
// from the store, and the file goes to the worker as it is. A chunk that
// arrives with no table to place it (a source that sends none) is kept
// on its own and copied in at the restore.
//
// Staging is a cache, never the only copy: every staged chunk is also in
// the store (as a pending chunk), so a restore that finds nothing staged,
// or another layout, reads the rest from the store and is just slower.
// The bytes staged on a host are bounded (Stager.Max); what would go over
// the bound is not staged. A session's staging goes away when its
// restore takes it, when the source drops it (DELETE
// /v1/chunks/staged/{id}, sent by a migration that failed), or when
// nothing fed it for Stager.Idle; it lives in this process's memory only,
// so it never leaves anything for gc.
package stage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// Stager holds the staged device memory of the sessions migrating to
// this host. The zero value is not usable; set Max.
type Stager struct {
	// Store is the host's store, where the chunks staged also are.
	Store *store.Store
	// Max bounds the bytes staged for all sessions together; a chunk
	// or table that would go over it is left in the store only.
	Max int64
	// Idle drops a session's staging that nothing fed or took for this
	// long (its source died or gave up); zero means 5 minutes.
	Idle time.Duration
	Log  *slog.Logger
	// OnDrop, when set, is told of each session whose source dropped
	// its staging (the migration failed): gpud kills a restore prepared
	// from it (restore.Restorer.DropPrepared).
	OnDrop func(session string)

	mu     sync.Mutex
	used   int64
	groups map[string]*Group
}

// Group is one session's staged device memory. Once taken from the
// Stager it belongs to its taker, who must Release it.
type Group struct {
	s       *Stager
	session string

	mu sync.Mutex
	// The table's memory file: file holds, for each block, the chunk
	// at[i] when ok[i]; where lists the blocks waiting for a chunk.
	tab   *devstore.Table
	file  *devstore.Snapshot
	at    []images.Chunk
	ok    []bool
	where map[store.Digest][]int
	fills sync.WaitGroup // background reads from the store
	// chunks arrived with no block to go to, outside Go's heap.
	chunks  map[store.Digest][]byte
	bytes   int64 // staged bytes: chunks, and the file's size
	skipped int   // chunks or tables left out: over the bound
	timer   *time.Timer
	taken   bool
	// memory: the source stages this session in memory only (a memory
	// pre-copy), so the staging holds blocks no store here has.
	memory bool
}

func (s *Stager) group(session string) *Group {
	if s == nil || ids.CheckSession(session) != nil {
		return nil
	}
	s.mu.Lock()
	if s.groups == nil {
		s.groups = map[string]*Group{}
	}
	g := s.groups[session]
	if g == nil {
		g = &Group{s: s, session: session, chunks: map[store.Digest][]byte{}, where: map[store.Digest][]int{}}
		g.timer = time.AfterFunc(s.idle(), func() { s.expire(g) })
		s.groups[session] = g
	}
	s.mu.Unlock()
	g.timer.Reset(s.idle())
	return g
}

// reserve takes n bytes of the bound; false when they are not left.
func (s *Stager) reserve(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used+n > s.Max {
		return false
	}
	s.used += n
	return true
}

func (s *Stager) unreserve(n int64) {
	s.mu.Lock()
	s.used -= n
	s.mu.Unlock()
}

// Table lays session's staging out as t, a pre-copy round's table, ahead
// of the round's chunks: blocks already holding their chunk stay, blocks
// whose chunk is staged or in st are filled (those from st in the
// background), and the others wait for their chunk to arrive. A table of
// other regions gets a new file, into which the blocks whose chunk the old
// one held are copied; one over the bound drops it, or,
// with memory (a memory pre-copy, whose chunks no store here will hold),
// is refused.
func (s *Stager) Table(ctx context.Context, session string, t *devstore.Table, memory bool) error {
	st := s.Store
	g := s.group(session)
	if g == nil {
		return errs.New(errs.InvalidArgument, errs.Session(session), "not a session id")
	}
	if err := t.Layout.Validate(); err != nil || len(t.Chunks) != t.Layout.Blocks {
		return errs.New(errs.InvalidArgument, errs.Session(session), "staged table: %d chunks for %d blocks (%v)", len(t.Chunks), t.Layout.Blocks, err)
	}
	g.fills.Wait() // the previous table's reads land first
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken {
		if memory {
			return errs.New(errs.FailedPrecondition, errs.Session(session), "staged device memory already taken by a restore")
		}
		return nil
	}
	g.memory = g.memory || memory
	if g.file == nil || !devstore.SameBlocks(g.tab.Layout, t.Layout) {
		// The session's regions changed since the last table (memory
		// allocated or freed between the rounds, or between the last
		// round and the freeze). The source sends only the blocks that
		// changed, so the blocks it kept must come from the old file:
		// in a memory pre-copy no store here has them.
		if !s.reserve(t.Layout.Size) {
			g.dropFile()
			g.skipped++
			if g.memory {
				return errs.New(errs.ResourceExhausted, errs.Session(session), "staging %d MiB of device memory would pass this host's staging bound of %d MiB (gpud --stage-max-bytes)", t.Layout.Size>>20, s.Max>>20)
			}
			s.log().Warn("device memory not staged: over the staging bound; the restore reads it from the store, and the downtime grows with it (raise gpud --stage-max-bytes)",
				"session", session, "bytes", t.Layout.Size, "bound", s.Max)
			return nil
		}
		f, err := devstore.Create(t.Layout)
		if err != nil {
			s.unreserve(t.Layout.Size)
			g.dropFile()
			return errs.Wrap(err, errs.Internal, errs.Session(session), "stage device memory")
		}
		oldFile, oldTab, oldAt, oldOK := g.file, g.tab, g.at, g.ok
		g.file, g.bytes = f, g.bytes+t.Layout.Size
		g.at, g.ok = make([]images.Chunk, t.Layout.Blocks), make([]bool, t.Layout.Blocks)
		for i := range g.ok {
			// A new file reads as zeros.
			g.at[i], g.ok[i] = images.Chunk{Size: t.Chunks[i].Size, Zero: true}, true
		}
		if oldFile != nil {
			g.carry(oldFile, oldTab, oldAt, oldOK, t)
			oldFile.Close()
			s.unreserve(oldTab.Layout.Size)
			g.bytes -= oldTab.Layout.Size
		}
	}
	g.tab = t
	clear(g.where)
	spans := t.Layout.Spans()
	var fromStore []int
	for i, c := range t.Chunks {
		if g.ok[i] && g.at[i] == c {
			continue
		}
		g.ok[i] = false
		dst := g.block(spans[i])
		switch {
		case c.Zero:
			clear(dst)
			g.at[i], g.ok[i] = c, true
		case g.chunks[c.Digest] != nil && len(g.chunks[c.Digest]) == len(dst):
			copy(dst, g.chunks[c.Digest])
			g.at[i], g.ok[i] = c, true
		default:
			g.where[c.Digest] = append(g.where[c.Digest], i)
			fromStore = append(fromStore, i)
		}
	}
	// What the store already has will not be sent: read it meanwhile.
	ds := make([]store.Digest, 0, len(fromStore))
	for _, i := range fromStore {
		ds = append(ds, t.Chunks[i].Digest)
	}
	if st == nil || len(ds) == 0 {
		return nil
	}
	missing, err := st.Missing(ctx, ds)
	if err != nil {
		return nil // the restore reads them from the store
	}
	coming := make(map[store.Digest]bool, len(missing))
	for _, d := range missing {
		coming[d] = true
	}
	var have []int
	for _, i := range fromStore {
		if d := t.Chunks[i].Digest; !coming[d] {
			have = append(have, i)
			delete(g.where, d)
		}
	}
	if len(have) > 0 {
		file, tab := g.file, t
		want := make([]bool, len(t.Chunks))
		for _, i := range have {
			want[i] = true
		}
		g.fills.Add(1)
		go func() {
			defer g.fills.Done()
			err := devstore.Fill(context.WithoutCancel(ctx), st, file, tab, func(i int) bool { return want[i] })
			g.mu.Lock()
			defer g.mu.Unlock()
			if err == nil && g.file == file && g.tab == tab {
				for _, i := range have {
					g.at[i], g.ok[i] = tab.Chunks[i], true
				}
			}
		}()
	}
	return nil
}

// carry copies into the new file (g.file, laid out as t) every block of
// t whose chunk the old file held, wherever it held it (g.mu held).
func (g *Group) carry(old *devstore.Snapshot, oldTab *devstore.Table, at []images.Chunk, ok []bool, t *devstore.Table) {
	held := make(map[store.Digest][]byte)
	for i, sp := range oldTab.Layout.Spans() {
		if c := at[i]; ok[i] && !c.Zero && c.Digest != (store.Digest{}) {
			held[c.Digest] = old.Data[sp.FileOff : sp.FileOff+int64(sp.Len)]
		}
	}
	if len(held) == 0 {
		return
	}
	spans := t.Layout.Spans()
	_ = devmem.Parallel(len(t.Chunks), func(i int) error {
		c := t.Chunks[i]
		if c.Zero {
			return nil
		}
		if b := held[c.Digest]; b != nil {
			if dst := g.block(spans[i]); len(dst) == len(b) {
				copy(dst, b)
				g.at[i] = c // each i is its own: no two goroutines share one
			}
		}
		return nil
	})
}

// block is span's bytes in the file.
func (g *Group) block(sp devmem.BlockSpan) []byte {
	return g.file.Data[sp.FileOff : sp.FileOff+int64(sp.Len)]
}

// dropFile lets the file go (g.mu held).
func (g *Group) dropFile() {
	if g.file == nil {
		return
	}
	g.file.Close()
	g.s.unreserve(g.tab.Layout.Size)
	g.bytes -= g.tab.Layout.Size
	g.file, g.tab, g.at, g.ok = nil, nil, nil, nil
	clear(g.where)
}

func (s *Stager) idle() time.Duration {
	if s.Idle > 0 {
		return s.Idle
	}
	return 5 * time.Minute
}

func (s *Stager) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Keep returns what stages a checked chunk's content for session: into
// the blocks of the staged table that hold it, or on its own when no
// block waits for it. The bytes are copied, so the caller may reuse
// them. Keep on a nil Stager returns nil.
func (s *Stager) Keep(session string) func(d store.Digest, raw []byte) {
	g := s.group(session)
	if g == nil {
		return nil
	}
	return g.add
}

// KeepMemory is Keep for chunks staged in memory only: it refuses a
// session whose source laid out no memory staging here (none, or one
// dropped, taken or left out for the bound), whose chunks would be lost.
func (s *Stager) KeepMemory(session string) (func(d store.Digest, raw []byte), error) {
	if s == nil {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(session), "this host does not stage device memory")
	}
	s.mu.Lock()
	g := s.groups[session]
	s.mu.Unlock()
	if g == nil {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(session), "no device memory is staged for it here (dropped, taken, or never laid out); the migration must start over")
	}
	g.mu.Lock()
	ok := g.memory && g.file != nil && !g.taken
	g.mu.Unlock()
	if !ok {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(session), "its staging here is not laid out for memory pre-copy; the migration must start over")
	}
	g.timer.Reset(s.idle())
	return g.add, nil
}

func (g *Group) add(d store.Digest, raw []byte) {
	if len(raw) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken {
		return
	}
	if is := g.where[d]; len(is) > 0 {
		spans := g.tab.Layout.Spans()
		for _, i := range is {
			if dst := g.block(spans[i]); len(dst) == len(raw) {
				copy(dst, raw)
				g.at[i], g.ok[i] = g.tab.Chunks[i], true
			}
		}
		delete(g.where, d)
		return
	}
	if g.chunks[d] != nil {
		return
	}
	n := int64(len(raw))
	if !g.s.reserve(n) {
		g.skipped++
		return
	}
	b, err := unix.Mmap(-1, 0, len(raw), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		g.s.unreserve(n)
		g.skipped++
		return
	}
	copy(b, raw)
	g.chunks[d] = b
	g.bytes += n
}

// awaitMax bounds Await: the source sends a freeze's last blocks within
// seconds, or has failed.
const awaitMax = time.Minute

// Await waits until session's staging holds save gen and, staged in
// memory only, every block of it: a migration's target restores the
// process while the freeze's last blocks still arrive, and reloads once
// they are in. A staging that holds nothing (over the bound) or was
// taken returns at once; what to make of it is the restore's to say.
func (s *Stager) Await(ctx context.Context, session string, gen uint64) error {
	deadline := time.Now().Add(awaitMax)
	for {
		s.mu.Lock()
		g := s.groups[session]
		s.mu.Unlock()
		if g == nil {
			return errs.New(errs.FailedPrecondition, errs.Session(session), "no device memory is staged for it here")
		}
		g.mu.Lock()
		done := g.file == nil || g.taken || (g.tab.Gen() == gen && (!g.memory || g.full()))
		g.mu.Unlock()
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return errs.New(errs.Unavailable, errs.Session(session), "the staged device memory did not reach save %x within %v; its source stopped sending", gen, awaitMax)
		}
		select {
		case <-ctx.Done():
			return errs.Wrap(ctx.Err(), errs.Unavailable, errs.Session(session), "wait for the staged device memory")
		case <-time.After(time.Millisecond):
		}
	}
}

// View waits, as Await does, until session's staging holds save gen
// whole, and returns a view of its file (its own descriptor and mapping,
// the caller's to close) with the table it holds; the staging stays, to
// take the freeze's blocks. A migration's target restores the session
// from its last image's dump before the freeze (restore.Restorer.Prepare,
// ahead) and reloads it from the view: the source sends nothing more
// until that restore is done, so nothing writes the file meanwhile.
func (s *Stager) View(ctx context.Context, session string, gen uint64) (*devstore.Snapshot, *devstore.Table, error) {
	if err := s.Await(ctx, session, gen); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	g := s.groups[session]
	s.mu.Unlock()
	if g == nil {
		return nil, nil, errs.New(errs.FailedPrecondition, errs.Session(session), "no device memory is staged for it here")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.file == nil || g.taken || g.tab.Gen() != gen || !g.full() {
		return nil, nil, errs.New(errs.FailedPrecondition, errs.Session(session), "the staged device memory is not save %x, whole", gen)
	}
	fd, err := unix.Dup(int(g.file.File.Fd()))
	if err != nil {
		return nil, nil, errs.Wrap(err, errs.Internal, errs.Session(session), "view the staged device memory")
	}
	snap, err := devstore.Open(os.NewFile(uintptr(fd), "devmem-staged"), g.file.Saved)
	if err != nil {
		return nil, nil, errs.Wrap(err, errs.Internal, errs.Session(session), "view the staged device memory")
	}
	return snap, &devstore.Table{Layout: g.tab.Layout, Chunks: slices.Clone(g.tab.Chunks)}, nil
}

// full says whether every block holds its table's chunk (g.mu held).
func (g *Group) full() bool {
	for i, ok := range g.ok {
		if !ok || g.at[i] != g.tab.Chunks[i] {
			return false
		}
	}
	return true
}

// Take removes session's staging from the stager and hands it to the
// caller (a restore), or returns nil when nothing is staged for it.
func (s *Stager) Take(session string) *Group {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	g := s.groups[session]
	delete(s.groups, session)
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	g.timer.Stop()
	g.mu.Lock()
	g.taken = true
	g.mu.Unlock()
	g.fills.Wait()
	return g
}

// Drop releases session's staging, if any; it reports whether there was
// some.
func (s *Stager) Drop(session string) bool {
	g := s.Take(session)
	g.Release()
	return g != nil
}

func (s *Stager) expire(g *Group) {
	s.mu.Lock()
	if s.groups[g.session] != g {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.Drop(g.session) {
		s.log().Info("staged device memory dropped: nothing fed or took it", "session", g.session, "after", s.idle())
	}
}

// Used is the bytes staged on this host now.
func (s *Stager) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Get returns chunk d's bytes when it is staged on its own, or nil. They
// stay valid until Release.
func (g *Group) Get(d store.Digest) []byte {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.chunks[d]
}

// Stats says what the group holds: blocks of its file holding their
// table's chunk, chunks staged on their own, the bytes of both, and
// chunks or tables left out for the bound.
func (g *Group) Stats() (blocks, chunks int, bytes int64, skipped int) {
	if g == nil {
		return 0, 0, 0, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, ok := range g.ok {
		if ok && g.tab != nil && g.at[i] == g.tab.Chunks[i] {
			blocks++
		}
	}
	return blocks, len(g.chunks), g.bytes, g.skipped
}

// Load returns the device memory of t (an image's table) for a worker to
// reload, and how many of its blocks came from the staging. When the
// staged file has t's regions it is the result: only the blocks that do
// not hold t's chunk are read (from the chunks staged on their own, else
// from st); otherwise a new file is read, taking staged chunks where it
// can. The result is the caller's to close; the group is spent.
func (g *Group) Load(ctx context.Context, st *store.Store, t *devstore.Table) (*devstore.Snapshot, int, error) {
	if g == nil {
		return devstore.LoadStaged(ctx, st, t, nil)
	}
	g.mu.Lock()
	file, tab := g.file, g.tab
	if file == nil || !devstore.SameBlocks(tab.Layout, t.Layout) {
		g.mu.Unlock()
		return devstore.LoadStaged(ctx, st, t, g.Get)
	}
	need := make([]bool, len(t.Chunks))
	hits := 0
	spans := tab.Layout.Spans()
	for i, c := range t.Chunks {
		if g.ok[i] && g.at[i] == c {
			hits++
			continue
		}
		if b := g.chunks[c.Digest]; !c.Zero && len(b) == int(c.Size) {
			copy(g.block(spans[i]), b)
			hits++
			continue
		}
		need[i] = true
	}
	// The file is the caller's now; its bytes leave the bound with it.
	g.file, g.tab, g.at, g.ok = nil, nil, nil, nil
	g.bytes -= tab.Layout.Size
	g.mu.Unlock()
	g.s.unreserve(tab.Layout.Size)
	if err := devstore.Fill(ctx, st, file, t, func(i int) bool { return need[i] }); err != nil {
		file.Close()
		return nil, 0, err
	}
	if err := file.SetLayout(t.Layout); err != nil {
		file.Close()
		return nil, 0, err
	}
	return file, hits, nil
}

// Table is the last table laid out for the group (nil for none).
func (g *Group) Table() *devstore.Table {
	if g == nil {
		return nil
	}
	g.fills.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tab
}

// Release gives the group's memory back. A nil group is a no-op.
func (g *Group) Release() {
	if g == nil {
		return
	}
	g.fills.Wait()
	g.mu.Lock()
	g.taken = true
	g.dropFile()
	chunks := g.chunks
	g.chunks = map[store.Digest][]byte{}
	freed := g.bytes
	g.bytes = 0
	g.mu.Unlock()
	for _, b := range chunks {
		_ = unix.Munmap(b)
	}
	g.s.unreserve(freed)
}

// TableBody is the body of PUT /v1/chunks/staged/{id}: a pre-copy
// round's table.
type TableBody struct {
	Layout *devmem.Layout `json:"layout"`
	Chunks []images.Chunk `json:"chunks"`
}

// maxTableBody bounds a table's JSON: about 80 bytes a block, and a
// block per MiB of device memory.
const maxTableBody = 64 << 20

// Register adds the staging routes (chunk routes, the administrator's):
// PUT /v1/chunks/staged/{id}, a round's table, and DELETE
// /v1/chunks/staged/{id}: the source of a migration that failed drops
// what it staged here.
func (s *Stager) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteStageTable, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := tenant.RequireAdmin(r.Context(), "staging a migration's device memory"); err != nil {
			return err
		}
		id := control.PathID(r)
		if err := ids.CheckSession(id); err != nil {
			return err
		}
		var body TableBody
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTableBody))
		if err := dec.Decode(&body); err != nil || body.Layout == nil {
			return errs.Wrap(cmp.Or(err, errors.New("no layout")), errs.InvalidArgument, errs.Session(id), "staged table")
		}
		memory := r.URL.Query().Get(api.MemoryParam) == "1"
		if err := s.Table(r.Context(), id, &devstore.Table{Layout: body.Layout, Chunks: body.Chunks}, memory); err != nil {
			return err
		}
		control.WriteJSON(w, map[string]bool{"staged": true})
		return nil
	}))
	mux.Handle(api.RouteDropStaged, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := tenant.RequireAdmin(r.Context(), "dropping a migration's staged memory"); err != nil {
			return err
		}
		id := control.PathID(r)
		if err := ids.CheckSession(id); err != nil {
			return err
		}
		dropped := s.Drop(id)
		if s.OnDrop != nil {
			// What was restored from the staging goes with it.
			s.OnDrop(id)
		}
		control.WriteJSON(w, map[string]bool{"dropped": dropped})
		return nil
	}))
}

// DefaultMax is the default bound: half the host's memory, or 1 GiB when
// that is unknown. A session's staging is all or nothing, and a quarter
// left a 32 GiB session on a 128 GiB GPU host unstaged: its restore read
// all 32 GiB from the store in the downtime (16.4 s of it on the H200).
func DefaultMax() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(si.Unit) / 2
}
