package devmem

import (
	"encoding/binary"
	"math/bits"
)

// The block hash tells whether a block of device memory changed since it
// was last saved. It is not the store's digest (BLAKE3, over the bytes
// that are stored): it only has to be fast on a GPU and on a CPU and give
// the same value on both, so that a block hashed on the device can be
// compared with one hashed on the host. It is keyed by a seed each worker
// draws at random, so a client cannot aim for a collision.
//
// A block is read as little-endian 64-bit words w[0..n). Lane j (of
// HashLanes) folds the words w[j], w[j+HashLanes], ... in order with
// xxHash64's round; on a GPU each of HashLanes threads takes one lane and
// its loads are coalesced, on a CPU the lanes are independent
// multiply chains the core overlaps. The lanes are then folded in order
// and mixed with the block's length. A block whose length is not a
// multiple of 8 hashes its tail as one zero-padded word.
const HashLanes = 32

const (
	prime1 uint64 = 0x9E3779B185EBCA87
	prime2 uint64 = 0xC2B2AE3D27D4EB4F
	prime3 uint64 = 0x165667B19E3779F9
)

func round(acc, w uint64) uint64 {
	acc += w * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

// HashBlock hashes one block.
func HashBlock(seed uint64, b []byte) uint64 {
	var lanes [HashLanes]uint64
	for j := range lanes {
		lanes[j] = seed + uint64(j)*prime3
	}
	n := len(b) / 8
	full := n / HashLanes * HashLanes
	for i := 0; i < full; i += HashLanes {
		w := b[i*8 : (i+HashLanes)*8]
		for j := range HashLanes {
			lanes[j] = round(lanes[j], binary.LittleEndian.Uint64(w[j*8:]))
		}
	}
	for i := full; i < n; i++ {
		lanes[i-full] = round(lanes[i-full], binary.LittleEndian.Uint64(b[i*8:]))
	}
	if t := len(b) % 8; t != 0 {
		var w [8]byte
		copy(w[:], b[n*8:])
		j := n - full
		lanes[j] = round(lanes[j], binary.LittleEndian.Uint64(w[:]))
	}
	h := uint64(len(b)) * prime1
	for _, l := range lanes {
		h = round(h, l)
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}
