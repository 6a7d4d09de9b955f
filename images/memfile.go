package images

import (
	"context"
	"encoding/binary"
	"io/fs"
	"path"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// MemFile is an image file that comes from memory rather than from the
// image directory, already cut into blocks: saved device memory, whose
// blocks are the unit of change detection. A block is either bytes of
// Data, stored as one chunk (or as a zero chunk), or Reuse: a chunk the
// store already holds for an unchanged block, which is listed without
// being read. Blocks follow each other and cover Data.
type MemFile struct {
	Path   string // a top-level name
	Data   []byte
	Blocks []MemBlock
	Mode   fs.FileMode // permission bits; 0 is 0600
}

// ReuseFiles lists the regular files of image m that keep says to keep
// as MemFiles of reused chunks only: a new image that holds them as they
// are, reading and storing nothing (a checkpoint that reuses its
// session's last process image). Only top-level regular files can be
// listed so; anything else kept is an error.
func ReuseFiles(m *Manifest, keep func(path string) bool) ([]MemFile, error) {
	var out []MemFile
	for _, f := range m.Files {
		if !keep(f.Path) {
			continue
		}
		if f.Type != TypeFile || path.Base(f.Path) != f.Path {
			return nil, errs.New(errs.FailedPrecondition, errs.Image(m.ID), "%s %q is not a top-level regular file; its files cannot be reused", f.Type, f.Path)
		}
		mf := MemFile{Path: f.Path, Mode: f.Mode, Blocks: make([]MemBlock, len(f.Chunks))}
		var off int64
		for i := range f.Chunks {
			c := f.Chunks[i]
			mf.Blocks[i] = MemBlock{Off: off, Len: int(c.Size), Reuse: &c}
			off += c.Size
		}
		out = append(out, mf)
	}
	return out, nil
}

// MemBlock is one block of a MemFile.
type MemBlock struct {
	Off   int64
	Len   int
	Reuse *Chunk
}

// memSegmentBlocks is how many blocks one worker stores at a time.
const memSegmentBlocks = 16

// queueMem lists the memory files and queues their blocks. The reused
// chunks are leased first: gc cannot take them before the commit indexes
// them, and one that is already gone fails the commit here.
func (c *commit) queueMem(ctx context.Context, files []MemFile) error {
	var reuse []store.Digest
	for _, mf := range files {
		for _, b := range mf.Blocks {
			if b.Reuse != nil && !b.Reuse.Zero {
				reuse = append(reuse, b.Reuse.Digest)
			}
		}
	}
	if len(reuse) > 0 {
		missing, err := c.in.Require(ctx, reuse)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return errs.New(errs.FailedPrecondition, c.subj, "chunk %s (and %d more) of the previous checkpoint is no longer stored; checkpoint again to store the device memory whole", missing[0], len(missing)-1)
		}
	}
	for _, mf := range files {
		if mf.Path == "" || path.Base(mf.Path) != mf.Path {
			return errs.New(errs.Internal, c.subj, "memory file %q: want a top-level name", mf.Path)
		}
		var pos int64
		for _, b := range mf.Blocks {
			if b.Off != pos || b.Len <= 0 || (b.Reuse == nil && b.Off+int64(b.Len) > int64(len(mf.Data))) || (b.Reuse != nil && b.Reuse.Size != int64(b.Len)) {
				return errs.New(errs.Internal, c.subj, "memory file %s: block at %d of %d bytes does not follow at %d", mf.Path, b.Off, b.Len, pos)
			}
			pos += int64(b.Len)
		}
		mode := mf.Mode
		if mode == 0 {
			mode = 0o600
		}
		pf := pendingFile{index: len(c.m.Files)}
		c.m.Files = append(c.m.Files, File{Path: mf.Path, Type: TypeFile, Mode: mode, Size: pos})
		for i := 0; i < len(mf.Blocks); i += memSegmentBlocks {
			res := &segResult{}
			pf.segs = append(pf.segs, res)
			select {
			case c.segs <- segment{data: mf.Data, mem: mf.Blocks[i:min(i+memSegmentBlocks, len(mf.Blocks))], out: res}:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		c.pending = append(c.pending, pf)
	}
	return nil
}

// memSegment stores a run of blocks: reused ones as they are, zero ones
// as nothing, the rest as one chunk each.
func memSegment(ctx context.Context, in *store.Ingest, data []byte, blocks []MemBlock, res *segResult) error {
	var (
		pend  [][]byte
		slots []int
	)
	res.chunkList = make([]Chunk, 0, len(blocks))
	for _, b := range blocks {
		switch {
		case b.Reuse != nil:
			res.chunkList = append(res.chunkList, *b.Reuse)
			if b.Reuse.Zero {
				res.zero += b.Reuse.Size
			} else {
				res.chunks++
			}
		case allZero(data[b.Off : b.Off+int64(b.Len)]):
			res.chunkList = append(res.chunkList, Chunk{Size: int64(b.Len), Zero: true})
			res.zero += int64(b.Len)
		default:
			res.chunkList = append(res.chunkList, Chunk{Size: int64(b.Len)})
			res.chunks++
			pend = append(pend, data[b.Off:b.Off+int64(b.Len)])
			slots = append(slots, len(res.chunkList)-1)
		}
	}
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
	return nil
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
