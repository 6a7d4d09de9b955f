// Package precopy is the first phase of a live migration: the session's
// device memory goes to the target while the session runs, in rounds.
// Round 1 sends every block; each later round sends the blocks whose hash
// changed since the round before. The rounds stop when what changed is
// small, stops shrinking, or the round limit is reached; the migration
// then freezes the session, and the checkpoint copies only the blocks
// that changed since the last round (checkpoint.Request.MemBase). A
// session that rewrites its memory faster than the rounds can send it
// therefore ends in an ordinary stop-and-copy, and still moves whole.
//
// Each round's blocks go into this host's store as pending chunks (held
// from gc until the migration ends), and the ones the target lacks are
// streamed to it ahead of the image (PUT /v1/chunks), where they wait as
// pending chunks too: the image pushed after the freeze then carries only
// the last changes and the process image, and the target restores from
// its own disk, not from the network.
//
// A memory pre-copy (Copier.Memory) stores nothing while it runs: each
// round goes to the target's staging only (api.MemoryParam), and this
// host keeps a mirror of the session's device memory as the last round
// left it, so that the freeze's save (only what changed since) can be
// completed in host memory for a rollback or for the image stored after
// the target took the session over. The rounds then go at the speed of
// the link, not of two disks, and a session that rewrites its memory
// faster than its store could write still converges.
package precopy

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate/stage"
	"github.com/gpuctl/gpuctl/store"
)

// Worker is a running session's worker as the rounds drive it.
type Worker interface {
	PrecopyMem(ctx context.Context, req devmem.PrecopyRequest) (*os.File, devmem.Saved, error)
}

// Target is the target gpud's chunk routes (*control.Client).
type Target interface {
	Addr() string
	MissingChunks(ctx context.Context, ds []api.Digest) ([]api.Digest, error)
	PutChunks(ctx context.Context, r io.Reader) (*api.PutChunksReply, error)
}

// StagingTarget is a Target that keeps the chunks it receives in memory
// for the session's restore (package migrate/stage), and lets go of them
// when the migration fails.
type StagingTarget interface {
	StageTable(ctx context.Context, session string, table any, memory bool) error
	PutChunksStaged(ctx context.Context, session string, r io.Reader, memory bool) (*api.PutChunksReply, error)
	DropStaged(ctx context.Context, session string) error
}

// Policy bounds the rounds.
type Policy struct {
	// MaxRounds is the most rounds before the freeze; 0 means 8.
	MaxRounds int
	// SmallBytes: a round that finds no more than this changed ends the
	// rounds; 0 means 32 MiB.
	SmallBytes int64
	// Shrink: a later round must find less than Shrink times what the
	// round before it found changed, or the rounds end (memory is being
	// rewritten as fast as it is sent); 0 means 0.9.
	Shrink float64
}

func (p Policy) fill() Policy {
	if p.MaxRounds <= 0 {
		p.MaxRounds = 8
	}
	if p.SmallBytes <= 0 {
		p.SmallBytes = 32 << 20
	}
	if p.Shrink <= 0 {
		p.Shrink = 0.9
	}
	return p
}

// Copier runs one migration's pre-copy from this host. Close must follow.
type Copier struct {
	Store   *store.Store
	Target  Target
	Session string
	Policy  Policy
	Log     *slog.Logger
	// Streams bounds the chunk streams a round sends in side by side;
	// zero means half the cores, 1 to 8.
	Streams int
	// Memory asks for a memory pre-copy (see the package comment); a
	// target that cannot stage the whole session in memory gets the
	// rounds through the stores instead.
	Memory bool

	gen      uint64                  // the last round
	table    *devstore.Table         // the last round, every block with its chunk
	staged   map[rkey][]images.Chunk // by region: the chunk the target holds for each block
	digests  []store.Digest          // chunks this pre-copy put into the store
	holds    []func()
	staging  bool          // the target was asked to stage chunks
	last     chan struct{} // closed when Last's sending is done
	lastSent int64         // what it sent
	lastErr  error         // and why it failed
	memory   bool          // the rounds are staged in the target's memory only
	// mirror is, in a memory pre-copy, every block as the last round
	// copied it (MemComplete reads it).
	mirror *devstore.Snapshot
	// spare is a memfd with its pages in for the next round to copy
	// into (devmem.PrecopyRequest.Into): the last round's, once sent, or
	// one made while the first round was sent. Faulting in the pages of
	// a new memfd took most of a round's copy (about 2 of 2.6 s for 6.7
	// GB on the H200 host).
	spare      *os.File
	spareReady chan *os.File
}

type rkey struct {
	kind     uint8
	id, size uint64
}

// Base is what the target holds after the rounds, for the freeze's save
// to be compared with; nil before the first round completes.
func (c *Copier) Base() *devstore.Table { return c.table }

// InMemory says whether the rounds were staged in the target's memory
// only: neither store holds Base's blocks, so the freeze must complete
// its save with MemComplete and the target take the session over from
// its staging.
func (c *Copier) InMemory() bool { return c.memory }

// Mirror returns a descriptor of this host's mirror of the rounds, for
// the freeze's save to write the changed blocks into (the caller closes
// it), and the round it holds; nil when there is none.
func (c *Copier) Mirror() (*os.File, uint64) {
	if !c.memory || c.mirror == nil {
		return nil, 0
	}
	fd, err := unix.Dup(int(c.mirror.File.Fd()))
	if err != nil {
		return nil, 0
	}
	return os.NewFile(uintptr(fd), "devmem-mirror"), c.gen
}

// MemComplete fills in the blocks a save relative to Base did not copy
// from this host's mirror of the rounds (checkpoint.Request.MemComplete).
// It must not be called after Close.
func (c *Copier) MemComplete(snap *devstore.Snapshot) error {
	if c.mirror == nil {
		return errs.New(errs.Internal, errs.Session(c.Session), "no host copy of the pre-copied device memory is left")
	}
	return devstore.CompleteFrom(snap, c.mirror)
}

// Run does the rounds and reports each.
func (c *Copier) Run(ctx context.Context, w Worker) ([]api.PrecopyRound, error) {
	p := c.Policy.fill()
	subj := errs.Session(c.Session)
	var rounds []api.PrecopyRound
	for n := 1; ; n++ {
		r, err := c.round(ctx, w)
		if err != nil {
			return rounds, errs.Wrap(err, errs.KindOf(err), subj, "pre-copy round %d", n)
		}
		rounds = append(rounds, r)
		c.log().Debug("pre-copy round", "session", c.Session, "round", n, "blocks", r.Blocks, "bytes", r.Bytes, "sent_bytes", r.SentBytes, "ms", r.DurationMS)
		switch {
		case r.Bytes <= p.SmallBytes:
		case n >= p.MaxRounds:
		case n >= 2 && float64(r.Bytes) >= p.Shrink*float64(rounds[n-2].Bytes):
		default:
			continue
		}
		return rounds, nil
	}
}

// round has the worker copy what changed, stores it, and sends the target
// what it lacks.
func (c *Copier) round(ctx context.Context, w Worker) (api.PrecopyRound, error) {
	t0 := time.Now()
	var r api.PrecopyRound
	if err := failpoint.Inject(ctx, "precopy/round"); err != nil {
		return r, err
	}
	into := c.takeSpare()
	f, sv, err := w.PrecopyMem(ctx, devmem.PrecopyRequest{Base: c.gen, Into: into})
	if into != nil && into != f {
		into.Close() // the worker's reply carries its own descriptor
	}
	if err != nil {
		return r, err
	}
	copied := time.Since(t0)
	snap, err := devstore.Open(f, sv)
	if err != nil {
		return r, errs.Wrap(err, errs.Internal, "", "read the copied device memory")
	}
	if c.gen == 0 && c.spareReady == nil && spareRoom(snap.Saved.LayoutOff) {
		// The first round: a memfd for the second is made while this
		// one is sent, where the host has room for it and as much again
		// (an idle session's second round copies next to nothing, and
		// the later rounds reuse the last one's memfd anyway).
		ch := make(chan *os.File, 1)
		c.spareReady = ch
		n := snap.Saved.LayoutOff
		go func() {
			f, err := devstore.Scratch(n)
			if err != nil {
				f = nil
			}
			ch <- f
		}()
	}
	defer func() {
		if c.mirror != snap {
			c.keepSpare(snap)
			snap.Close()
		}
	}()
	r, err = c.stage(ctx, snap, false)
	r.CopyMS = copied.Milliseconds()
	r.PauseMS = sv.PauseNS / 1e6
	r.DurationMS = time.Since(t0).Milliseconds()
	return r, err
}

// spareRoom says whether the host has room for a spare memfd of n bytes:
// n and as much again, and 8 GiB, available.
func spareRoom(n int64) bool { return devstore.MemAvailable() >= 2*n+8<<30 }

// takeSpare returns the memfd the next round copies into, or nil.
func (c *Copier) takeSpare() *os.File {
	if c.spare == nil && c.spareReady != nil {
		c.spare = <-c.spareReady
		c.spareReady = nil
	}
	f := c.spare
	c.spare = nil
	return f
}

// keepSpare keeps a descriptor of a sent round's memfd, whose pages are
// in, for the next round.
func (c *Copier) keepSpare(snap *devstore.Snapshot) {
	if snap == nil || snap.File == nil || c.spare != nil {
		return
	}
	fd, err := unix.Dup(int(snap.File.Fd()))
	if err != nil {
		return
	}
	c.spare = os.NewFile(uintptr(fd), "devmem-spare")
}

// stage stores the blocks snap holds (those changed since the last
// round), sends the target the round's table and the chunks it lacks,
// and makes snap the last round. In a memory pre-copy nothing is stored,
// and a round's blocks (not the freeze's: last) go into the mirror.
func (c *Copier) stage(ctx context.Context, snap *devstore.Snapshot, last bool) (api.PrecopyRound, error) {
	var r api.PrecopyRound
	l := snap.Layout
	if l.Base != 0 && l.Base != c.gen {
		return r, errs.New(errs.Internal, "", "the worker copied relative to round %x, not %x", l.Base, c.gen)
	}
	spans := l.Spans()
	chunks := make([]images.Chunk, len(spans))
	var send []int
	for i, s := range spans {
		// Changed, not sent: a freeze's save into the mirror holds
		// every block, and sends only those that changed.
		if l.IsChanged(i) {
			send = append(send, i)
			r.Blocks++
			r.Bytes += int64(s.Len)
			continue
		}
		rg := l.Regions[s.Region]
		if old, ok := c.staged[rkey{rg.Kind, rg.ID, rg.Size}]; ok && l.Base != 0 {
			chunks[i] = old[s.Index]
		}
		// Otherwise the worker has no hash for the block either (its
		// region went away mid-round), so the freeze sends it: the
		// table's entry is never read.
		chunks[i].Size = int64(s.Len)
	}
	// The blocks' digests first, on every core: the target's table
	// needs them, and with them the store and the link can each take
	// the blocks from memory at once, side by side, instead of the link
	// waiting for the store and then reading the blocks back from it.
	ds, data := digestBlocks(snap, spans, send, chunks)
	full := *l
	full.Base, full.Changed = 0, nil
	full.Sent = make([]byte, len(l.Sent))
	for i := range l.Blocks {
		full.Sent[i/8] |= 1 << (i % 8)
	}
	t1 := time.Now()
	if st, ok := c.Target.(StagingTarget); ok {
		// The target lays its staging out by the round's table before
		// the chunks come, so that each lands where it belongs.
		c.staging = true
		body := stage.TableBody{Layout: &full, Chunks: chunks}
		mem := c.memory || (c.Memory && c.table == nil)
		err := st.StageTable(ctx, c.Session, body, mem)
		switch {
		case err == nil:
			c.memory = mem
		case c.memory:
			// Earlier rounds are in its memory only: no going back.
			return r, errs.Wrap(err, errs.KindOf(err), errs.Host(c.Target.Addr()), "stage the round's table")
		case mem:
			c.log().Info("the target cannot stage the session in memory; the pre-copy goes through the stores", "session", c.Session, "target", c.Target.Addr(), "err", err)
			err = st.StageTable(ctx, c.Session, body, false)
		}
		if err != nil && !c.memory {
			// Staging only spares the restore reading the store: a
			// target that cannot stage still takes the chunks.
			c.log().Debug("the target did not stage the round's table", "session", c.Session, "target", c.Target.Addr(), "err", err)
		}
	}
	var (
		wg      sync.WaitGroup
		putErr  error
		sendErr error
	)
	wg.Go(func() {
		t0 := time.Now()
		if c.memory {
			if !last {
				putErr = c.remirror(snap)
			}
		} else {
			putErr = c.put(ctx, ds, data)
		}
		r.StoreMS = time.Since(t0).Milliseconds()
	})
	wg.Go(func() {
		r.SentBytes, sendErr = c.send(ctx, ds, data)
		r.SendMS = time.Since(t1).Milliseconds()
	})
	wg.Wait()
	if putErr != nil {
		return r, putErr
	}
	if sendErr != nil {
		return r, sendErr
	}
	staged := make(map[rkey][]images.Chunk, len(l.Regions))
	for i, s := range spans {
		rg := l.Regions[s.Region]
		k := rkey{rg.Kind, rg.ID, rg.Size}
		if staged[k] == nil {
			staged[k] = make([]images.Chunk, devmem.BlocksOf(rg.Size, l.Block))
		}
		staged[k][s.Index] = chunks[i]
	}
	c.gen, c.staged, c.table = l.Gen, staged, &devstore.Table{Layout: &full, Chunks: chunks}
	return r, nil
}

// Last starts sending, while the freeze goes on (CRIU dumps the worker,
// the image is stored), what the freeze's save copied: the blocks that
// changed since the last round, into this host's store and to the
// target's staging, so that the push after the freeze finds the target
// holding them and its restore finds them staged. It reads its own
// mapping of the save's memory file: the freeze may close or roll back
// snap meanwhile. Failing costs only time (the push sends what the
// target lacks); WaitLast waits for it.
func (c *Copier) Last(ctx context.Context, snap *devstore.Snapshot) {
	// A memory pre-copy's target adopts the session only from the
	// freeze's own save: its table goes even when nothing changed.
	if c.table == nil || snap == nil || (!anyChanged(snap.Layout) && !c.memory) {
		return
	}
	fd, err := unix.Dup(int(snap.File.Fd()))
	if err != nil {
		return
	}
	own, err := devstore.Open(os.NewFile(uintptr(fd), "devmem"), snap.Saved)
	if err != nil {
		return
	}
	done := make(chan struct{})
	c.last = done
	go func() {
		defer close(done)
		defer own.Close()
		r, err := c.stage(ctx, own, true)
		if err != nil {
			c.log().Debug("the freeze's changed blocks were not sent ahead", "session", c.Session, "memory", c.memory, "err", err)
		}
		c.lastSent, c.lastErr = r.SentBytes, err
	}()
}

// StagedGen returns what waits for the sending Last started, if any, and
// then says the generation of the save whose table the target staged
// last (0 when it stages nothing). Call it where Last was called; the
// function it returns may be called from any goroutine, once.
func (c *Copier) StagedGen() func() uint64 {
	done := c.last
	return func() uint64 {
		if done != nil {
			<-done
		}
		if !c.staging {
			return 0
		}
		return c.gen
	}
}

// WaitLast waits for what Last started and returns the bytes it sent,
// and, in a memory pre-copy, why it failed: the target then lacks the
// freeze's last blocks, which no push brings (elsewhere the push sends
// what Last did not, and the error is nil).
func (c *Copier) WaitLast() (int64, error) {
	if c.last != nil {
		<-c.last
		c.last = nil
	}
	n, err := c.lastSent, c.lastErr
	c.lastSent, c.lastErr = 0, nil
	if !c.memory {
		err = nil
	}
	return n, err
}

// digestBlocks fills in the chunk of every sent block (a zero block is
// Zero, any other its digest) on every core, and returns the distinct
// digests in the order of first use with the content of the first sent
// block that has each.
func digestBlocks(snap *devstore.Snapshot, spans []devmem.BlockSpan, send []int, chunks []images.Chunk) ([]store.Digest, map[store.Digest][]byte) {
	_ = devmem.Parallel(len(send), func(k int) error {
		i := send[k]
		s := spans[i]
		b := snap.Data[s.FileOff : s.FileOff+int64(s.Len)]
		chunks[i] = images.Chunk{Size: int64(s.Len)}
		if allZero(b) {
			chunks[i].Zero = true
		} else {
			chunks[i].Digest = store.Sum(b)
		}
		return nil
	})
	var ds []store.Digest
	data := map[store.Digest][]byte{}
	for _, i := range send {
		if ch := chunks[i]; !ch.Zero && data[ch.Digest] == nil {
			s := spans[i]
			data[ch.Digest] = snap.Data[s.FileOff : s.FileOff+int64(s.Len)]
			ds = append(ds, ch.Digest)
		}
	}
	return ds, data
}

// put stores the chunks ds of the sent blocks as pending chunks, on
// every core, and holds them from gc until Close.
func (c *Copier) put(ctx context.Context, ds []store.Digest, data map[store.Digest][]byte) error {
	in := c.Store.NewIngest()
	defer in.Abort()
	const seg = 16
	err := devmem.Parallel((len(ds)+seg-1)/seg, func(k int) error {
		part := ds[k*seg : min(len(ds), (k+1)*seg)]
		bs := make([][]byte, len(part))
		for j, d := range part {
			bs[j] = data[d]
		}
		got, _, _, err := in.PutBatch(ctx, bs)
		if err != nil {
			return err
		}
		for j := range got {
			if got[j] != part[j] {
				return errs.New(errs.Internal, "", "a copied block changed while it was stored")
			}
		}
		return nil
	})
	if err != nil {
		return errs.Wrap(err, errs.KindOf(err), "", "store the copied blocks")
	}
	if err := failpoint.Inject(ctx, "precopy/store"); err != nil {
		return err
	}
	if err := in.Commit(ctx, nil); err != nil {
		return errs.Wrap(err, errs.KindOf(err), "", "store the copied blocks")
	}
	c.holds = append(c.holds, c.Store.Hold(ds))
	c.digests = append(c.digests, ds...)
	return nil
}

// send streams to the target, straight from the round's memory, the
// chunks of ds it lacks, and returns the bytes that crossed.
func (c *Copier) send(ctx context.Context, ds []store.Digest, data map[store.Digest][]byte) (int64, error) {
	if len(ds) == 0 {
		return 0, nil
	}
	host := errs.Host(c.Target.Addr())
	ads := make([]api.Digest, len(ds))
	for i, d := range ds {
		ads[i] = api.Digest(d)
	}
	missing, err := c.Target.MissingChunks(ctx, ads)
	if err != nil {
		return 0, errs.Wrap(err, errs.KindOf(err), host, "ask which chunks it lacks")
	}
	if len(missing) == 0 {
		return 0, nil
	}
	want := make([]store.Digest, len(missing))
	bs := make([][]byte, len(missing))
	var total int64
	for i, d := range missing {
		want[i] = store.Digest(d)
		if bs[i] = data[want[i]]; bs[i] == nil {
			return 0, errs.New(errs.Internal, host, "the target asked for chunk %s, not one of the round's", want[i])
		}
		total += int64(len(bs[i]))
	}
	// Several streams side by side: one stream's framing and checksum
	// run on one core at each end, about 0.9 GB/s on the H200 host,
	// below the rate a busy session rewrites its memory.
	if _, ok := c.Target.(StagingTarget); ok {
		c.staging = true
	}
	n := int(min(int64(c.sendStreams()), max(1, total/sendShardMin)))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		sent  int64
		first error
	)
	lo := 0
	for k := range n {
		hi := len(want) * (k + 1) / n
		part, pbs := want[lo:hi], bs[lo:hi]
		lo = hi
		wg.Go(func() {
			m, err := c.sendStream(ctx, host, part, pbs)
			mu.Lock()
			defer mu.Unlock()
			sent += m
			if first == nil {
				first = err
			}
		})
	}
	wg.Wait()
	return sent, first
}

// sendShardMin is the least a stream of a round's send carries (a
// variable for the tests).
var sendShardMin int64 = 64 << 20

// sendStreams is how many streams a round's send uses at most.
func (c *Copier) sendStreams() int {
	if c.Streams > 0 {
		return c.Streams
	}
	return min(8, max(1, runtime.GOMAXPROCS(0)/2))
}

// sendStream streams the chunks want (contents bs) to the target in one
// chunk stream.
func (c *Copier) sendStream(ctx context.Context, host string, want []store.Digest, bs [][]byte) (int64, error) {
	if len(want) == 0 {
		return 0, nil
	}
	pr, pw := io.Pipe()
	var n int64
	done := make(chan error, 1)
	go func() {
		var err error
		n, err = images.WriteRawChunks(ctx, want, bs, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	var err error
	if st, ok := c.Target.(StagingTarget); ok {
		_, err = st.PutChunksStaged(ctx, c.Session, pr, c.memory)
	} else {
		_, err = c.Target.PutChunks(ctx, pr)
	}
	_ = pr.CloseWithError(io.ErrClosedPipe)
	werr := <-done
	if err != nil {
		return n, errs.Wrap(err, errs.KindOf(err), host, "send %d chunks", len(want))
	}
	if werr != nil {
		return n, errs.Wrap(werr, errs.KindOf(werr), "", "send the copied blocks")
	}
	return n, nil
}

// Close ends the pre-copy: the chunks it put here are released, and those
// no image took up (a failed migration, blocks a later round replaced) are
// left for the next gc rather than kept for the pending grace.
func (c *Copier) Close(ctx context.Context) {
	_, _ = c.WaitLast()
	c.mirror.Close()
	c.mirror = nil
	if f := c.takeSpare(); f != nil {
		f.Close()
	}
	for _, h := range c.holds {
		h()
	}
	c.holds = nil
	if err := c.Store.Unpend(ctx, c.digests); err != nil {
		c.log().Warn("pre-copy chunks left pending", "session", c.Session, "err", err)
	}
	c.digests = nil
}

// Unstage tells the target to let go of what it staged for the session:
// the migration failed, and no restore there will take it. It is best
// effort; the target drops staging nothing feeds on its own.
func (c *Copier) Unstage(ctx context.Context) {
	_, _ = c.WaitLast()
	st, ok := c.Target.(StagingTarget)
	if !ok || !c.staging {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := st.DropStaged(ctx, c.Session); err != nil {
		c.log().Warn("the target's staged device memory was not dropped; it drops it when idle", "session", c.Session, "target", c.Target.Addr(), "err", err)
	}
	c.staging = false
}

// remirror brings the mirror up to snap, a round: snap itself when it is
// the first, complete round; otherwise its blocks are copied in, into a
// new mirror laid out as snap when the session's regions changed.
func (c *Copier) remirror(snap *devstore.Snapshot) error {
	l := snap.Layout
	if c.mirror == nil && c.table == nil && l.SentCount() == l.Blocks {
		c.mirror = snap // round() leaves it open
		return nil
	}
	if c.mirror == nil && c.table != nil {
		return errs.New(errs.Internal, errs.Session(c.Session), "the host copy of the pre-copied device memory is gone")
	}
	if c.mirror == nil || !devstore.SameBlocks(c.mirror.Layout, l) {
		nl := *l
		nl.Sent = make([]byte, len(l.Sent))
		m, err := devstore.Create(&nl)
		if err != nil {
			// Without it a rollback could not reload the session: the
			// round fails, with the session running here.
			return errs.Wrap(err, errs.ResourceExhausted, errs.Session(c.Session), "keep a host copy of the pre-copied device memory")
		}
		if c.mirror != nil {
			devstore.CopyBlocks(m, c.mirror, func(int) bool { return true })
			c.mirror.Close()
		}
		c.mirror = m
	}
	devstore.CopyBlocks(c.mirror, snap, func(int) bool { return true })
	return nil
}

func (c *Copier) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

func anyChanged(l *devmem.Layout) bool {
	for i := range l.Blocks {
		if l.IsChanged(i) {
			return true
		}
	}
	return false
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
