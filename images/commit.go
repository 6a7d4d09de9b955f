package images

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/images/chunker"
	"github.com/gpuctl/gpuctl/store"
)

// Stats describe one commit.
type Stats struct {
	LogicalBytes int64         `json:"bytes"`        // sum of file sizes
	StoredBytes  int64         `json:"stored_bytes"` // new compressed bytes the commit added
	ZeroBytes    int64         `json:"zero_bytes"`   // bytes in all-zero chunks, stored as nothing
	Chunks       int           `json:"chunks"`       // non-zero chunks, with repeats
	NewChunks    int           `json:"new_chunks"`   // chunks the store did not have
	Duration     time.Duration `json:"duration_ns"`
	// Index is the part of Duration spent making the new packs durable
	// and indexing the image in one transaction; the rest is reading,
	// chunking, hashing and compressing (or receiving, for an import).
	Index time.Duration `json:"index_ns"`
}

// Commit chunks and stores every file under srcDir and indexes the image
// described by meta, all or nothing: until it returns successfully no one
// sees the image, and a failure or a crash leaves only garbage that GC
// reclaims. Hashing and compression run on st.Workers() goroutines. Regular
// files, directories and symlinks that stay inside srcDir are supported;
// anything else is refused. srcDir must not change while Commit runs.
func Commit(ctx context.Context, st *store.Store, srcDir string, meta Meta) (*Manifest, Stats, error) {
	return CommitWith(ctx, st, srcDir, meta, nil)
}

// CommitWith is Commit with files that are not in srcDir but in memory,
// cut into the blocks given (see MemFile); they follow srcDir's entries.
func CommitWith(ctx context.Context, st *store.Store, srcDir string, meta Meta, extra []MemFile) (*Manifest, Stats, error) {
	return commitSegmented(ctx, st, srcDir, meta, extra, 0, nil)
}

// ChunkObserver is shown the non-zero chunks of srcDir's files as a
// commit stores them: a batch at a time, from the commit's workers at
// once, in no order, repeats included. The slices are valid only during
// the call. A migration sends them to its target while the store goes on.
type ChunkObserver func(ds []store.Digest, data [][]byte)

// CommitObserved is CommitWith that shows observe the chunks of srcDir's
// files (not extra's blocks) as they are stored.
func CommitObserved(ctx context.Context, st *store.Store, srcDir string, meta Meta, extra []MemFile, observe ChunkObserver) (*Manifest, Stats, error) {
	return commitSegmented(ctx, st, srcDir, meta, extra, 0, observe)
}

// commitSegmented is CommitObserved with the files cut into segments of
// segment bytes (0: segmentFor).
func commitSegmented(ctx context.Context, st *store.Store, srcDir string, meta Meta, extra []MemFile, segment int, observe ChunkObserver) (*Manifest, Stats, error) {
	start := time.Now()
	if meta.ID == "" {
		meta.ID = ids.NewImage()
	}
	if err := ids.CheckImage(meta.ID); err != nil {
		return nil, Stats{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := newCommit(st, meta)
	c.segment, c.observe = segment, observe
	defer c.release()

	// The steps: workers chunk, hash and compress while the walk lists
	// the tree and queues regular files; then each file's chunks are
	// joined in order and the image is indexed in one transaction.
	c.startWorkers(ctx, cancel)
	walkErr := c.walk(ctx, srcDir)
	if walkErr == nil {
		walkErr = c.queueMem(ctx, extra)
	}
	if err := c.wait(ctx, walkErr); err != nil {
		return nil, Stats{}, err
	}
	c.collect()
	if err := c.index(ctx); err != nil {
		return nil, Stats{}, err
	}
	c.stats.Duration = time.Since(start)
	return c.m, c.stats, nil
}

// commit is one Commit in progress.
//
// A large file is cut into segments at offsets where the chunker is
// certain to end a chunk anyway (chunker.Cuts), and the workers chunk,
// hash and compress whole segments: the chunking, like the rest, runs on
// every core, and the chunks are exactly those of one sequential pass.
// Each worker hands the store its segment's chunks in batches, which the
// store looks up in one read transaction.
type commit struct {
	st   *store.Store
	in   *store.Ingest
	m    *Manifest
	subj string

	segment int           // the files' segment size; 0 is segmentFor's
	observe ChunkObserver // may be nil
	segs    chan segment
	wg      sync.WaitGroup
	maps    [][]byte      // the files' mappings, unmapped by release
	pending []pendingFile // regular files whose chunks the workers find

	mu        sync.Mutex // guards the three counts the workers add to
	newChunks int
	chunks    int
	zeroBytes int64

	stats Stats
}

// segment is data[start:end] of a mapped file, whose chunks a worker puts
// in out.
type segment struct {
	data  []byte
	start int64
	end   int64
	out   *segResult
	mem   []MemBlock // set for a MemFile's blocks, which are not chunked again
}

// pendingFile is m.Files[index], waiting for its segments' chunks.
type pendingFile struct {
	index int
	segs  []*segResult
}

func newCommit(st *store.Store, meta Meta) *commit {
	return &commit{
		st:   st,
		in:   st.NewIngest(),
		m:    &Manifest{Version: ManifestVersion, Meta: meta, Created: time.Now().UTC(), Chunking: chunker.Default.String()},
		subj: errs.Image(meta.ID),
		segs: make(chan segment, 2*st.Workers()),
	}
}

// release drops what a commit holds: the file mappings, and the ingest,
// which keeps nothing once committed.
func (c *commit) release() {
	for _, b := range c.maps {
		_ = unix.Munmap(b)
	}
	c.in.Abort()
}

// startWorkers runs the workers; the first one to fail cancels ctx with
// its error, and the others then drain the queue without work.
func (c *commit) startWorkers(ctx context.Context, cancel context.CancelCauseFunc) {
	for range c.st.Workers() {
		c.wg.Go(func() {
			for sg := range c.segs {
				if ctx.Err() != nil {
					continue
				}
				var res segResult
				err := faultSafe(c.subj, func() error {
					if sg.mem != nil {
						return memSegment(ctx, c.in, sg.data, sg.mem, &res)
					}
					return chunkSegment(ctx, c.in, sg.data, sg.start, sg.end, &res, c.observe)
				})
				if err != nil {
					cancel(err)
					continue
				}
				*sg.out = res
				c.mu.Lock()
				c.newChunks += res.fresh
				c.chunks += res.chunks
				c.zeroBytes += res.zero
				c.mu.Unlock()
			}
		})
	}
}

// walk lists srcDir into the manifest, parents before children, and
// queues each regular file's segments for the workers.
func (c *commit) walk(ctx context.Context, srcDir string) error {
	return filepath.WalkDir(srcDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return errs.Wrap(err, errs.InvalidArgument, c.subj, "read %s", p)
		}
		if cerr := context.Cause(ctx); cerr != nil {
			return cerr
		}
		rel, _ := filepath.Rel(srcDir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := de.Info()
		if err != nil {
			return errs.Wrap(err, errs.InvalidArgument, c.subj, "stat %s", p)
		}
		f := File{Path: rel, Mode: fi.Mode().Perm()}
		switch {
		case fi.Mode().IsDir():
			f.Type = TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			f.Type = TypeSymlink
			if f.Link, err = os.Readlink(p); err != nil {
				return errs.Wrap(err, errs.InvalidArgument, c.subj, "read link %s", p)
			}
			if err := checkLink(rel, f.Link); err != nil {
				return errs.New(errs.InvalidArgument, c.subj, "%s: %v", p, err)
			}
			f.Mode = 0o777
		case fi.Mode().IsRegular():
			f.Type = TypeFile
			if err := c.queueFile(ctx, p, fi.Size(), &f); err != nil {
				return err
			}
		default:
			return errs.New(errs.InvalidArgument, c.subj, "%s is a %v; an image holds only files, directories and symlinks", p, fi.Mode().Type())
		}
		c.m.Files = append(c.m.Files, f)
		return nil
	})
}

// queueFile maps regular file p, which becomes manifest entry f, and
// queues its segments.
func (c *commit) queueFile(ctx context.Context, p string, size int64, f *File) error {
	data, err := mapFile(p, size)
	if err != nil {
		return errs.Wrap(err, errs.InvalidArgument, c.subj, "read %s", p)
	}
	if data != nil {
		c.maps = append(c.maps, data)
	}
	f.Size = int64(len(data))
	var cuts []int64
	if err := faultSafe(c.subj, func() error {
		seg := c.segment
		if seg <= 0 {
			seg = segmentFor(int64(len(data)), c.st.Workers())
		}
		cuts = chunker.Cuts(data, chunker.Default, seg)
		return nil
	}); err != nil {
		return errs.Wrap(err, errs.KindOf(err), c.subj, "chunk %s", p)
	}
	pf := pendingFile{index: len(c.m.Files)}
	for i, a := range cuts {
		b := int64(len(data))
		if i+1 < len(cuts) {
			b = cuts[i+1]
		}
		if a == b {
			break // an empty file
		}
		res := &segResult{}
		pf.segs = append(pf.segs, res)
		select {
		case c.segs <- segment{data: data, start: a, end: b, out: res}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	c.pending = append(c.pending, pf)
	return nil
}

// wait closes the queue and waits for the workers. The walk's error comes
// first, then a worker's.
func (c *commit) wait(ctx context.Context, walkErr error) error {
	close(c.segs)
	c.wg.Wait()
	if walkErr != nil {
		return walkErr
	}
	return context.Cause(ctx)
}

// collect joins each regular file's segments into its chunk list.
func (c *commit) collect() {
	for _, pf := range c.pending {
		f := &c.m.Files[pf.index]
		n := 0
		for _, res := range pf.segs {
			n += len(res.chunkList)
		}
		f.Chunks = make([]Chunk, 0, n)
		for _, res := range pf.segs {
			f.Chunks = append(f.Chunks, res.chunkList...)
		}
	}
}

// index checks the manifest and commits the ingest with the image's
// record: the chunks become durable and the image visible together.
func (c *commit) index(ctx context.Context) error {
	if err := failpoint.Inject(ctx, "images/commit/index"); err != nil {
		return err
	}
	if err := c.m.Validate(); err != nil {
		return errs.Wrap(err, errs.Internal, "", "the manifest Commit built is invalid")
	}
	c.stats = Stats{
		LogicalBytes: c.m.Bytes(), StoredBytes: c.in.StoredBytes(), ZeroBytes: c.zeroBytes,
		Chunks: c.chunks, NewChunks: c.newChunks,
	}
	rec, err := record(c.m, c.stats.StoredBytes)
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = c.in.Commit(ctx, rec)
	c.stats.Index = time.Since(t0)
	return err
}

// commitSegment is the most of a file one worker chunks at a time: small
// enough that a many-core host has work for every core in a
// few-gigabyte pages file, large enough that the per-segment cost (one
// cut search, about one average chunk read) is noise.
const commitSegment = 32 << 20

// minCommitSegment is the least: a cut search costs about 1% of it.
const minCommitSegment = 1 << 20

// segmentFor is the segment for a file of size bytes with workers
// goroutines: two segments a worker, between the two bounds. A
// migration's process image (a CUDA worker's pages file of about 60 MB
// once the driver's zero pages are dropped) is stored while the client
// waits; in 32 MiB segments it kept two cores of sixteen busy. The cuts
// are places Split ends a chunk anyway, so the segment size changes no
// chunk.
func segmentFor(size int64, workers int) int {
	return int(min(max(size/int64(2*max(workers, 1)), minCommitSegment), commitSegment))
}

// segResult is what chunking one segment of a file gave.
type segResult struct {
	chunkList []Chunk
	chunks    int   // non-zero chunks
	zero      int64 // bytes in zero chunks
	fresh     int   // chunks the store did not have
}

// chunkSegment chunks data[start:end] and puts its non-zero chunks through
// in, in batches.
func chunkSegment(ctx context.Context, in *store.Ingest, data []byte, start, end int64, res *segResult, observe ChunkObserver) error {
	const batch = 32
	var (
		pend  [][]byte
		slots []int
	)
	flush := func() error {
		if len(pend) == 0 {
			return nil
		}
		ds, _, fresh, err := in.PutBatch(ctx, pend)
		if err != nil {
			return err
		}
		for i, d := range ds {
			res.chunkList[slots[i]].Digest = d
		}
		if observe != nil {
			observe(ds, pend)
		}
		res.fresh += fresh
		pend, slots = pend[:0], slots[:0]
		return nil
	}
	err := chunker.Split(data[start:end], start, chunker.Default, func(c chunker.Chunk) error {
		res.chunkList = append(res.chunkList, Chunk{Size: int64(c.Len), Zero: c.Zero})
		if c.Zero {
			res.zero += int64(c.Len)
			return nil
		}
		res.chunks++
		pend = append(pend, data[c.Off:c.Off+int64(c.Len)])
		slots = append(slots, len(res.chunkList)-1)
		if len(pend) == batch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// record is the store's view of an image.
func record(m *Manifest, newBytes int64) (*store.ImageRecord, error) {
	body, err := encodeManifest(m)
	if err != nil {
		return nil, err
	}
	refs, _ := m.Refs()
	info, err := json.Marshal(m.info(newBytes, len(refs)))
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Image(m.ID), "encode info")
	}
	return &store.ImageRecord{ID: m.ID, Info: info, Manifest: body, Refs: refs}, nil
}

// faultSafe runs fn with memory faults turned into an error. A source file
// that shrinks while it is mapped makes reads past its new end raise
// SIGBUS; that must fail the commit, not kill gpud.
func faultSafe(subj string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(interface{ Addr() uintptr }); !ok {
				panic(r)
			}
			err = errs.New(errs.FailedPrecondition, subj, "a file shrank while being committed; nothing may change the image directory during a commit")
		}
	}()
	return fn()
}

// mapFile maps a file read-only: chunks are hashed and compressed straight
// from the page cache without a copy. An empty file maps to nil.
func mapFile(p string, size int64) ([]byte, error) {
	if size == 0 {
		return nil, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() == 0 {
		return nil, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, errors.Join(errors.New("mmap"), err)
	}
	_ = unix.Madvise(b, unix.MADV_SEQUENTIAL)
	return b, nil
}
