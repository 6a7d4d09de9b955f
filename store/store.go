package store

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// MaxChunkSize bounds one chunk's uncompressed size. Readers refuse
// anything larger, which bounds what a corrupt or hostile record can make
// them allocate.
const MaxChunkSize = 4 << 20

// Options tune a store. The zero value is ready to use.
type Options struct {
	// Logger receives the store's log lines; nil means slog.Default().
	Logger *slog.Logger
	// Workers bounds the goroutines that compress, hash and verify;
	// 0 means GOMAXPROCS.
	Workers int
	// PackSize is the size at which an ingest seals a pack and starts the
	// next; 0 means 256 MiB.
	PackSize int64
	// PendingGrace is how long chunks received ahead of their manifest
	// (PutChunks during a migration) survive gc at zero references; 0
	// means one hour.
	PendingGrace time.Duration
	// LockTimeout is how long Open waits for another process holding the
	// database; 0 means 2 seconds.
	LockTimeout time.Duration
	// NoSync skips fsyncs. Only for benchmarks that measure everything
	// else; a crash can then lose committed images.
	NoSync bool
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.PackSize <= 0 {
		o.PackSize = 256 << 20
	}
	if o.PendingGrace <= 0 {
		o.PendingGrace = time.Hour
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 2 * time.Second
	}
}

// Store is a host's index and blob store. It is safe for concurrent use.
type Store struct {
	db   *bolt.DB
	dir  string // STATE_DIR
	opts Options
	log  *slog.Logger

	// mu guards leases. GC holds it for its whole sweep so that a chunk
	// cannot be leased and collected at once.
	mu     sync.Mutex
	leases map[Digest]int // chunks some in-flight ingest relies on

	// sweep keeps Check from seeing a pack between gc dropping its record
	// and its file: GC holds it for writing, Check for reading.
	sweep sync.RWMutex

	inflightMu sync.Mutex
	inflight   map[string]bool // pack file names (tmp or sealed, not yet indexed)

	packsMu sync.RWMutex        // GC takes it to delete pack files
	files   map[Digest]*os.File // open sealed packs, for reads

	scratch sync.Pool // *[]byte buffers for compressing and checking chunks

	enc *zstd.Encoder // EncodeAll is safe for concurrent use
	dec *zstd.Decoder // DecodeAll is safe for concurrent use
}

// Open opens or creates the store under stateDir (STATE_DIR/gpud.db and
// STATE_DIR/blobs), migrating the schema if it is older than this build.
func Open(ctx context.Context, stateDir string, opts Options) (*Store, error) {
	opts.fill()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, d := range []string{stateDir, filepath.Join(stateDir, "blobs", "packs"), filepath.Join(stateDir, "blobs", "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, errs.Wrap(err, errs.FailedPrecondition, "", "create state dir %s; check --state-dir and its permissions", d)
		}
	}
	path := filepath.Join(stateDir, "gpud.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, NoSync: opts.NoSync, FreelistType: bolt.FreelistMapType})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, errs.Wrap(err, errs.FailedPrecondition, "", "%s is locked by another process; is another gpud using --state-dir %s?", path, stateDir)
		}
		return nil, errs.Wrap(err, errs.DataLoss, "", "open %s", path)
	}
	s := &Store{
		db: db, dir: stateDir, opts: opts, log: opts.Logger,
		leases: map[Digest]int{}, inflight: map[string]bool{}, files: map[Digest]*os.File{},
	}
	s.scratch.New = func() any { b := make([]byte, 0, 256<<10); return &b }
	s.enc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(opts.Workers), zstd.WithLowerEncoderMem(true),
		// Every chunk is checked against its BLAKE3 digest; zstd's own checksum
		// would be a second, weaker one.
		zstd.WithEncoderCRC(false))
	s.dec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(opts.Workers), zstd.WithDecoderMaxMemory(MaxChunkSize*2))
	if err := migrate(db); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Dir is the state dir the store lives in.
func (s *Store) Dir() string { return s.dir }

// packStripes is how many packs an ingest fills at once: one per eight
// workers, so that appends (a copy, a checksum and a write to the page
// cache under the pack's lock) keep up with the workers compressing.
func (s *Store) packStripes() int { return max(1, (s.opts.Workers+7)/8) }

// Workers is the parallelism callers should use for chunk work.
func (s *Store) Workers() int { return s.opts.Workers }

// Close closes the database and the open pack files.
func (s *Store) Close() error {
	s.packsMu.Lock()
	for id, f := range s.files {
		_ = f.Close()
		delete(s.files, id)
	}
	s.packsMu.Unlock()
	if s.enc != nil {
		_ = s.enc.Close()
	}
	if s.dec != nil {
		s.dec.Close()
	}
	if err := s.db.Close(); err != nil {
		return errs.Wrap(err, errs.Internal, "", "close %s", s.db.Path())
	}
	return nil
}

func (s *Store) packsDir() string { return filepath.Join(s.dir, "blobs", "packs") }
func (s *Store) tmpDir() string   { return filepath.Join(s.dir, "blobs", "tmp") }
func (s *Store) packPath(id Digest) string {
	return filepath.Join(s.packsDir(), id.String()+".pack")
}

// lease marks d as relied upon by an in-flight ingest; gc skips it.
func (s *Store) lease(d Digest) {
	s.mu.Lock()
	s.leases[d]++
	s.mu.Unlock()
}

// leaseAll is lease for each of ds, under one lock.
func (s *Store) leaseAll(ds []Digest) {
	if len(ds) == 0 {
		return
	}
	s.mu.Lock()
	for _, d := range ds {
		s.leases[d]++
	}
	s.mu.Unlock()
}

// Hold keeps ds from gc until the returned release is called, for readers
// that must not lose chunks midway (a checkout, an export) even if the
// image they read is deleted meanwhile.
func (s *Store) Hold(ds []Digest) (release func()) {
	s.mu.Lock()
	for _, d := range ds {
		s.leases[d]++
	}
	s.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { s.release(ds) }) }
}

func (s *Store) release(ds []Digest) {
	s.mu.Lock()
	for _, d := range ds {
		if s.leases[d] <= 1 {
			delete(s.leases, d)
		} else {
			s.leases[d]--
		}
	}
	s.mu.Unlock()
}

// setInflight marks a pack file as being written, so gc leaves it. A name
// is marked before the file exists under it and unmarked only once the
// index names it or it is gone.
func (s *Store) setInflight(name string, on bool) {
	s.inflightMu.Lock()
	if on {
		s.inflight[name] = true
	} else {
		delete(s.inflight, name)
	}
	s.inflightMu.Unlock()
}

func (s *Store) isInflight(name string) bool {
	s.inflightMu.Lock()
	defer s.inflightMu.Unlock()
	return s.inflight[name]
}

// syncDir fsyncs a directory so that a rename or unlink in it is durable.
func (s *Store) syncDir(dir string) error {
	if s.opts.NoSync {
		return nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (s *Store) view(fn func(tx *bolt.Tx) error) error { return s.db.View(fn) }

func (s *Store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

var (
	bucketMeta     = []byte("meta")
	bucketImages   = []byte("images")
	bucketChunks   = []byte("chunks")
	bucketPacks    = []byte("packs")
	bucketSessions = []byte("sessions")
	keyVersion     = []byte("version")
	keyInfo        = []byte("info")
	keyManifest    = []byte("manifest")
	keyRefs        = []byte("refs")
)

func dbErr(err error, what string) error {
	if err == nil {
		return nil
	}
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errs.Wrap(err, errs.Internal, "", "%s", what)
}

func must(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return errs.New(errs.DataLoss, "", "index corrupt: "+format, args...)
}
