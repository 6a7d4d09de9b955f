package store

import (
	"encoding/binary"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Chunk encodings inside a pack.
const (
	encRaw  = 0 // stored as is: compression would not have saved space
	encZstd = 1 // one zstd frame
)

// chunkRecord is the value under chunks/<digest>.
type chunkRecord struct {
	Pack    Digest
	Offset  uint64 // of the payload within the pack file
	Stored  uint32 // payload length
	Raw     uint32 // uncompressed length
	Enc     uint8
	Refs    uint32
	Pending int64 // unix nanoseconds until which gc keeps it at zero refs
}

const chunkRecordLen = 32 + 8 + 4 + 4 + 1 + 4 + 8

func (r chunkRecord) encode() []byte {
	b := make([]byte, 0, chunkRecordLen)
	b = append(b, r.Pack[:]...)
	b = binary.BigEndian.AppendUint64(b, r.Offset)
	b = binary.BigEndian.AppendUint32(b, r.Stored)
	b = binary.BigEndian.AppendUint32(b, r.Raw)
	b = append(b, r.Enc)
	b = binary.BigEndian.AppendUint32(b, r.Refs)
	return binary.BigEndian.AppendUint64(b, uint64(r.Pending))
}

func decodeChunkRecord(b []byte) (chunkRecord, bool) {
	var r chunkRecord
	if len(b) != chunkRecordLen {
		return r, false
	}
	copy(r.Pack[:], b)
	b = b[32:]
	r.Offset = binary.BigEndian.Uint64(b)
	r.Stored = binary.BigEndian.Uint32(b[8:])
	r.Raw = binary.BigEndian.Uint32(b[12:])
	r.Enc = b[16]
	r.Refs = binary.BigEndian.Uint32(b[17:])
	r.Pending = int64(binary.BigEndian.Uint64(b[21:]))
	return r, r.Enc <= encZstd && r.Raw <= MaxChunkSize
}

func (r chunkRecord) pending(now time.Time) bool { return r.Pending > now.UnixNano() }

// packRecord is the value under packs/<id>.
type packRecord struct {
	Size       uint64 // file size
	LiveChunks uint64 // indexed chunks whose payload is in this pack
	LiveBytes  uint64 // their stored bytes
}

func (r packRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.Size)
	b = binary.BigEndian.AppendUint64(b, r.LiveChunks)
	return binary.BigEndian.AppendUint64(b, r.LiveBytes)
}

func decodePackRecord(b []byte) (packRecord, bool) {
	if len(b) != 24 {
		return packRecord{}, false
	}
	return packRecord{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(b[16:])}, true
}

var bucketBySession = []byte("bysession")

// indexSession records image id under its session.
func indexSession(idx *bolt.Bucket, session string, id []byte) error {
	if session == "" {
		return nil
	}
	b, err := idx.CreateBucketIfNotExists([]byte(session))
	if err != nil {
		return err
	}
	return b.Put(id, nil)
}

// sessionOfInfo reads the "session" member of an image's info JSON.
func sessionOfInfo(info []byte) string {
	var v struct {
		Session string `json:"session"`
	}
	_ = json.Unmarshal(info, &v)
	return v.Session
}

func packID(b []byte) (Digest, bool) {
	var d Digest
	if len(b) != len(d) {
		return d, false
	}
	copy(d[:], b)
	return d, true
}
