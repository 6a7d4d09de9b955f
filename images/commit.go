package images

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
}

// NewID returns a fresh image id.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "img-" + hex.EncodeToString(b[:])
}

// Commit chunks and stores every file under srcDir and indexes the image
// described by meta, all or nothing: until it returns successfully no one
// sees the image, and a failure or a crash leaves only garbage that GC
// reclaims. Hashing and compression run on st.Workers() goroutines. Regular
// files, directories and symlinks that stay inside srcDir are supported;
// anything else is refused. srcDir must not change while Commit runs.
func Commit(ctx context.Context, st *store.Store, srcDir string, meta Meta) (*Manifest, Stats, error) {
	start := time.Now()
	if meta.ID == "" {
		meta.ID = NewID()
	}
	if err := ValidID(meta.ID); err != nil {
		return nil, Stats{}, err
	}
	subj := errs.Image(meta.ID)
	m := &Manifest{Version: ManifestVersion, Meta: meta, Created: time.Now().UTC(), Chunking: chunker.Default.String()}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	in := st.NewIngest()
	defer in.Abort()

	// A large file is cut into segments at offsets where the chunker is
	// certain to end a chunk anyway (chunker.Cuts), and the workers chunk,
	// hash and compress whole segments: the chunking, like the rest, runs
	// on every core, and the chunks are exactly those of one sequential
	// pass. Each worker hands the store its segment's chunks in batches,
	// which the store looks up in one read transaction.
	type segment struct {
		data  []byte // the file's mapping
		start int64
		end   int64
		out   *segResult
	}
	segs := make(chan segment, 2*st.Workers())
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		newCount int
		chunks   int
		zeroB    int64
	)
	for range st.Workers() {
		wg.Go(func() {
			for sg := range segs {
				if ctx.Err() != nil {
					continue
				}
				var res segResult
				err := faultSafe(subj, func() error { return chunkSegment(ctx, in, sg.data, sg.start, sg.end, &res) })
				if err != nil {
					cancel(err)
					continue
				}
				*sg.out = res
				mu.Lock()
				newCount += res.fresh
				chunks += res.chunks
				zeroB += res.zero
				mu.Unlock()
			}
		})
	}
	send := func(sg segment) error {
		select {
		case segs <- sg:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	var maps [][]byte
	defer func() {
		for _, b := range maps {
			_ = unix.Munmap(b)
		}
	}()
	var stats Stats
	type pendingFile struct {
		index int
		segs  []*segResult
	}
	var pending []pendingFile
	walkErr := filepath.WalkDir(srcDir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return errs.Wrap(err, errs.InvalidArgument, subj, "read %s", p)
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
			return errs.Wrap(err, errs.InvalidArgument, subj, "stat %s", p)
		}
		f := File{Path: rel, Mode: fi.Mode().Perm()}
		switch {
		case fi.Mode().IsDir():
			f.Type = TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			f.Type = TypeSymlink
			if f.Link, err = os.Readlink(p); err != nil {
				return errs.Wrap(err, errs.InvalidArgument, subj, "read link %s", p)
			}
			if err := checkLink(rel, f.Link); err != nil {
				return errs.New(errs.InvalidArgument, subj, "%s: %v", p, err)
			}
			f.Mode = 0o777
		case fi.Mode().IsRegular():
			f.Type = TypeFile
			data, err := mapFile(p, fi.Size())
			if err != nil {
				return errs.Wrap(err, errs.InvalidArgument, subj, "read %s", p)
			}
			if data != nil {
				maps = append(maps, data)
			}
			f.Size = int64(len(data))
			var cuts []int64
			if err := faultSafe(subj, func() error {
				cuts = chunker.Cuts(data, chunker.Default, commitSegment)
				return nil
			}); err != nil {
				return errs.Wrap(err, errs.KindOf(err), subj, "chunk %s", p)
			}
			pf := pendingFile{index: len(m.Files)}
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
				if err := send(segment{data: data, start: a, end: b, out: res}); err != nil {
					return err
				}
			}
			pending = append(pending, pf)
		default:
			return errs.New(errs.InvalidArgument, subj, "%s is a %v; an image holds only files, directories and symlinks", p, fi.Mode().Type())
		}
		m.Files = append(m.Files, f)
		return nil
	})
	close(segs)
	wg.Wait()
	if walkErr != nil {
		return nil, Stats{}, walkErr
	}
	if err := context.Cause(ctx); err != nil {
		return nil, Stats{}, err
	}
	for _, pf := range pending {
		f := &m.Files[pf.index]
		n := 0
		for _, res := range pf.segs {
			n += len(res.chunkList)
		}
		f.Chunks = make([]Chunk, 0, n)
		for _, res := range pf.segs {
			f.Chunks = append(f.Chunks, res.chunkList...)
		}
	}
	stats.Chunks = chunks
	stats.ZeroBytes = zeroB
	// Every chunk is written and the image is not yet indexed: the window
	// a crash or a concurrent gc must not turn into a half-stored image.
	if err := failpoint.Inject(ctx, "images/commit/index"); err != nil {
		return nil, Stats{}, err
	}
	if err := m.Validate(); err != nil {
		return nil, Stats{}, errs.Wrap(err, errs.Internal, "", "the manifest Commit built is invalid")
	}
	stats.LogicalBytes = m.Bytes()
	stats.NewChunks = newCount
	stats.StoredBytes = in.StoredBytes()
	rec, err := record(m, stats.StoredBytes)
	if err != nil {
		return nil, Stats{}, err
	}
	if err := in.Commit(ctx, rec); err != nil {
		return nil, Stats{}, err
	}
	stats.Duration = time.Since(start)
	return m, stats, nil
}

// commitSegment is how much of a file one worker chunks at a time: small
// enough that a many-core host has work for every core in a
// few-gigabyte pages file, large enough that the per-segment cost (one
// cut search) is noise.
const commitSegment = 32 << 20

// segResult is what chunking one segment of a file gave.
type segResult struct {
	chunkList []Chunk
	chunks    int   // non-zero chunks
	zero      int64 // bytes in zero chunks
	fresh     int   // chunks the store did not have
}

// chunkSegment chunks data[start:end] and puts its non-zero chunks through
// in, in batches.
func chunkSegment(ctx context.Context, in *store.Ingest, data []byte, start, end int64, res *segResult) error {
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
	info, err := json.Marshal(m.info(newBytes))
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Image(m.ID), "encode info")
	}
	refs, _ := m.Refs()
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
