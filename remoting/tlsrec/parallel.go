package tlsrec

import (
	"crypto/cipher"
	"runtime"
	"sync"
	"syscall"
)

// Bulk transfers seal and open records on several goroutines.
//
// A TLS 1.3 record depends on nothing but the traffic keys and its
// sequence number, so the records of one large Write can be sealed at
// once, each with the sequence number of its place in the stream, and
// written in that order; and the records of a large Read can be opened at
// once, each straight into its place in the caller's buffer. Both
// pipeline the crypto with the socket: a Write hands one sealed batch to
// the socket while the next batch is being sealed, and a Read takes what
// the socket has ready while the records read before are being opened.
// Small writes and reads (every request, reply and launch) stay on the
// caller's goroutine, as before: no hand-off on the round trip.
const (
	// parMinWrite: a Write at least this long is sealed in parallel.
	parMinWrite = 8 * maxPlaintext
	// parMinRead, parMinData: a Read into a buffer at least this long
	// opens records in parallel when the whole ones buffered that fit it
	// hold at least parMinData bytes and the first is at least half full:
	// a bulk stream, not a run of small requests, which cost less opened
	// one after another than handed out.
	parMinRead = 8 * maxPlaintext
	parMinData = 4 * maxPlaintext
	// batchRecords is how many records one batch of a bulk Write holds.
	batchRecords = 64
	// fullRecord is the length of a sealed record of maxPlaintext bytes.
	fullRecord = headerLen + maxPlaintext + 1 + tagLen
	// bigRaw is the receive buffer of a Conn that has read bulk data: a
	// batch's worth of records per read from the socket.
	bigRaw = batchRecords * (headerLen + maxCiphertext)
	// maxWorkers bounds the goroutines one transfer uses: past a few,
	// the socket copy, not the crypto, is what limits.
	maxWorkers = 8
)

// workers is how many goroutines a bulk transfer seals or opens on.
func workers() int { return min(runtime.GOMAXPROCS(0), maxWorkers) }

// parallel returns n AEADs for the direction's current keys, one for each
// goroutine, so that none is used by two at once.
func (h *half) parallel(s *suite, n int) ([]cipher.AEAD, error) {
	for len(h.par) < n {
		a, _, err := s.keys(h.secret)
		if err != nil {
			return nil, err
		}
		h.par = append(h.par, a)
	}
	return h.par[:n], nil
}

// writeParallel seals p on nw goroutines, batchRecords records at a time,
// and writes each batch while the next is being sealed. The records are
// exactly the serial path's: record k holds p[k*maxPlaintext:] (up to a
// record's worth) under sequence number c.out.seq+k, so what goes on the
// wire is the same bytes in the same order whichever path sealed them.
// wmu held; the caller checked that the sequence numbers last.
func (c *Conn) writeParallel(p []byte, nw int) (int, error) {
	aeads, err := c.out.parallel(c.suite, nw)
	if err != nil {
		c.werr = err
		return 0, err
	}
	for i := range c.sealBufs {
		if len(c.sealBufs[i]) < batchRecords*fullRecord {
			c.sealBufs[i] = make([]byte, batchRecords*fullRecord)
		}
	}
	const batch = batchRecords * maxPlaintext
	var (
		wg   sync.WaitGroup
		lens [2]int
	)
	iv := c.out.iv
	seal := func(slot int, data []byte, seq uint64) {
		recs := (len(data) + maxPlaintext - 1) / maxPlaintext
		lens[slot] = len(data) + recs*(headerLen+1+tagLen)
		buf := c.sealBufs[slot]
		g := min(nw, recs)
		wg.Add(g)
		for w := 0; w < g; w++ {
			lo, hi := w*recs/g, (w+1)*recs/g
			go func(a cipher.AEAD) {
				defer wg.Done()
				for k := lo; k < hi; k++ {
					at := k * fullRecord
					// Every record but a batch's last is full, so record k
					// starts at k*fullRecord.
					sealRecord(buf[at:at:at+fullRecord], a, &iv, seq+uint64(k), typeApplicationData,
						data[k*maxPlaintext:min(len(data), (k+1)*maxPlaintext)])
				}
			}(aeads[w])
		}
	}
	done, seq := 0, c.out.seq
	seal(0, p[:min(len(p), batch)], seq)
	for slot := 0; done < len(p); slot ^= 1 {
		wg.Wait()
		n := min(len(p)-done, batch)
		recs := uint64(n+maxPlaintext-1) / maxPlaintext
		if next := done + n; next < len(p) {
			seal(slot^1, p[next:min(len(p), next+batch)], seq+recs)
		}
		if _, err := c.nc.Write(c.sealBufs[slot][:lens[slot]]); err != nil {
			wg.Wait() // the sealers use p and the buffers
			c.werr = err
			return done, err
		}
		seq += recs
		c.out.seq = seq
		done += n
	}
	return done, nil
}

// span is a whole record in the receive buffer: its header at raw[at:],
// clen bytes of ciphertext after it.
type span struct{ at, clen int }

// group is one goroutine's share of a bulk read: consecutive records,
// opened one after another from start in the caller's buffer.
type group struct {
	start int // where the first record's data goes
	end   int // where the group's data ends if no record is padded
	n     int // bytes of application data put there
	recs  int // records opened as application data, from the first
}

// readParallel opens the whole records buffered (after reading what the
// socket has ready) on up to nw goroutines, each into its place in p,
// while it reads what the socket has ready next. Each record's place
// assumes the records before it are application data without padding, as
// every peer of ours sends; the first record that is not (a KeyUpdate, an
// alert, padding, a record that fails authentication) is where the
// parallel part ends: the records before it are delivered and it is left,
// with everything after it, for the serial path, which re-opens it. 0, nil
// means the serial path should take this read: not a bulk stream, or too
// little of it buffered.
// rmu held, c.pending empty, nothing ended.
func (c *Conn) readParallel(p []byte, nw int) (int, error) {
	if cap(c.raw) < bigRaw {
		nb := append(make([]byte, 0, bigRaw), c.raw[c.rpos:]...)
		c.raw, c.rpos = nb, 0
		c.spare = make([]byte, 0, bigRaw)
	}
	if err := c.fill(); err != nil {
		return 0, err
	}
	if c.recordLen() < maxPlaintext/2 {
		return 0, nil
	}
	if c.rpos > 0 && cap(c.raw)-len(c.raw) < headerLen+maxCiphertext {
		n := copy(c.raw, c.raw[c.rpos:])
		c.raw, c.rpos = c.raw[:n], 0
	}
	c.raw = c.topUp(c.raw)

	// The whole records that fit p, each with its data where it would go
	// if all before it were unpadded application data.
	spans := c.spans[:0]
	at, room := c.rpos, len(p)
	for len(c.raw)-at >= headerLen {
		h := c.raw[at:]
		clen := int(h[3])<<8 | int(h[4])
		if h[0] != typeApplicationData || clen > maxCiphertext || clen < tagLen+1 ||
			len(c.raw)-at < headerLen+clen || clen-tagLen-1 > room {
			break
		}
		room -= clen - tagLen - 1
		spans = append(spans, span{at, clen})
		at += headerLen + clen
	}
	c.spans = spans
	if len(p)-room < parMinData {
		return 0, nil
	}
	end := at
	g := min(nw, len(spans))
	aeads, err := c.in.parallel(c.suite, g)
	if err != nil {
		return 0, c.fail(alertInternalError, err)
	}
	// What follows the records goes first in the next buffer, and the
	// socket's next bytes after it while these records are opened.
	c.spare = append(c.spare[:0], c.raw[end:]...)
	var wg sync.WaitGroup
	iv := c.in.iv
	off := 0
	for w := 0; w < g; w++ {
		lo, hi := w*len(spans)/g, (w+1)*len(spans)/g
		c.groups[w] = group{start: off}
		for _, s := range spans[lo:hi] {
			off += s.clen - tagLen - 1
		}
		c.groups[w].end = off
		if c.scratch[w] == nil {
			c.scratch[w] = make([]byte, maxCiphertext)
		}
		wg.Add(1)
		go func(gr *group, a cipher.AEAD, raw []byte, seq uint64, spans []span, scratch []byte) {
			defer wg.Done()
			openGroup(gr, a, &iv, raw, spans, p, seq, scratch)
		}(&c.groups[w], aeads[w], c.raw, c.in.seq+uint64(lo), spans[lo:hi], c.scratch[w])
	}
	c.spare = c.topUp(c.spare)
	wg.Wait()

	// Deliver in order: a group that came up short (padding) moves the
	// data after it down; one that stopped early ends the delivery.
	n, opened := 0, 0
	for w := 0; w < g; w++ {
		gr := &c.groups[w]
		if gr.start != n {
			copy(p[n:], p[gr.start:gr.start+gr.n])
		}
		n += gr.n
		opened += gr.recs
		if hi := (w + 1) * len(spans) / g; opened < hi {
			break
		}
	}
	c.in.seq += uint64(opened)
	c.parRecs += uint64(opened)
	if opened == len(spans) {
		c.raw, c.spare, c.rpos = c.spare, c.raw[:0], 0
		return n, nil
	}
	// The serial path carries on from the first record not delivered,
	// followed by what was read meanwhile.
	from := spans[opened].at
	rest := make([]byte, 0, max(bigRaw, end-from+len(c.spare)))
	rest = append(append(rest, c.raw[from:end]...), c.spare...)
	clear(c.raw[:cap(c.raw)])
	c.raw, c.rpos = rest, 0
	c.spare = c.spare[:0]
	return n, nil
}

// openGroup opens consecutive records into p from gr.start, each right
// after the data of the one before. A record is opened in place only if
// its content-type byte, which follows its data, lands inside the group:
// otherwise (the group's last record, or one followed only by empty ones)
// that byte would be written over the next group's first byte while
// another goroutine writes it, so the record is opened into scratch and
// its data copied. It stops at the first record that fails authentication
// or is not application data.
func openGroup(gr *group, a cipher.AEAD, iv *[12]byte, raw []byte, spans []span, p []byte, seq uint64, scratch []byte) {
	cur := gr.start
	for i, s := range spans {
		inner := s.clen - tagLen
		inPlace := cur+inner <= gr.end
		dst := scratch[:0]
		if inPlace {
			dst = p[cur : cur : cur+inner]
		}
		nonce := seqNonce(iv, seq+uint64(i))
		out, err := a.Open(dst, nonce[:], raw[s.at+headerLen:s.at+headerLen+s.clen], raw[s.at:s.at+headerLen])
		if err != nil {
			return
		}
		j := len(out) - 1
		for j >= 0 && out[j] == 0 {
			j-- // padding
		}
		if j < 0 || out[j] != typeApplicationData {
			return
		}
		if !inPlace {
			copy(p[cur:], out[:j])
		}
		cur += j
		gr.n, gr.recs = cur-gr.start, i+1
	}
}

// topUp appends to b what the socket has ready, up to b's capacity,
// without waiting: a bulk read takes the next records while it opens the
// ones it has, and must not block for bytes the peer may never send (a
// reader's buffer can be larger than what the peer sends before waiting
// for an answer). An error is left for the next blocking read to find.
func (c *Conn) topUp(b []byte) []byte {
	if c.rc == nil {
		return b
	}
	for len(b) < cap(b) {
		var m int
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			m, rerr = syscall.Read(int(fd), b[len(b):cap(b)])
			return true
		})
		if err != nil || rerr != nil || m <= 0 {
			break
		}
		b = b[:len(b)+m]
	}
	return b
}
