package wire

import (
	"fmt"
	"io"
)

// RequestHeaderSize and ReplyHeaderSize are the fixed frame headers.
const (
	RequestHeaderSize = 24
	ReplyHeaderSize   = 40
)

// Request flags.
const (
	// FlagAsync marks a request the client does not wait for: the server
	// sends no reply. A failure becomes the context's pending error, which
	// the next synchronous call of that context returns.
	FlagAsync uint16 = 1 << 0
	// FlagAckRequest asks the server to send an Ack frame once it has
	// executed this request, so that the client can recycle its ring.
	FlagAckRequest uint16 = 1 << 1
	// FlagDeferred marks a device-to-host copy the client does not wait
	// for but whose reply it reads when it arrives (into page-locked
	// memory). Like an asynchronous request it leaves earlier pending
	// errors alone and a failure becomes the context's pending error; like
	// a synchronous one it is answered, in order with every other reply.
	// Only MemcpyDtoH and MemcpyDtoH3D take it, and only from a server
	// whose Welcome announces FeatureDeferredReplies.
	FlagDeferred uint16 = 1 << 2

	knownRequestFlags = FlagAsync | FlagAckRequest | FlagDeferred
)

// RequestHeader opens every client frame.
//
//	off size
//	0   4    Len: bytes of the argument block that follows
//	4   2    Op
//	6   2    Flags
//	8   8    Seq: strictly increasing per session (gaps allowed)
//	16  8    Bulk: bytes of bulk payload that follow the argument block
type RequestHeader struct {
	Len   uint32
	Op    Op
	Flags uint16
	Seq   uint64
	Bulk  uint64
}

// Async reports whether the client expects no reply.
func (h *RequestHeader) Async() bool { return h.Flags&FlagAsync != 0 }

// Deferred reports whether the client reads the reply without waiting
// for it (FlagDeferred).
func (h *RequestHeader) Deferred() bool { return h.Flags&FlagDeferred != 0 }

// Put encodes h into b[:RequestHeaderSize].
func (h *RequestHeader) Put(b []byte) {
	_ = b[RequestHeaderSize-1]
	le.PutUint32(b[0:], h.Len)
	le.PutUint16(b[4:], uint16(h.Op))
	le.PutUint16(b[6:], h.Flags)
	le.PutUint64(b[8:], h.Seq)
	le.PutUint64(b[16:], h.Bulk)
}

// DecodeRequestHeader decodes and validates a request header against the
// negotiated maximum argument block. Unknown ops are not an error here (the
// dispatch answers them with CUDA_ERROR_NOT_SUPPORTED); unknown flags,
// oversized blocks and oversized bulk are.
func DecodeRequestHeader(b []byte, maxFrame uint32) (RequestHeader, error) {
	if len(b) < RequestHeaderSize {
		return RequestHeader{}, protoErr("request header: %d bytes, want %d", len(b), RequestHeaderSize)
	}
	h := RequestHeader{
		Len:   le.Uint32(b[0:]),
		Op:    Op(le.Uint16(b[4:])),
		Flags: le.Uint16(b[6:]),
		Seq:   le.Uint64(b[8:]),
		Bulk:  le.Uint64(b[16:]),
	}
	switch {
	case h.Len > maxFrame:
		return h, protoErr("request seq %d: argument block of %d bytes exceeds the maximum frame of %d", h.Seq, h.Len, maxFrame)
	case h.Bulk > MaxBulk:
		return h, protoErr("request seq %d: bulk payload of %d bytes exceeds %d", h.Seq, h.Bulk, uint64(MaxBulk))
	case h.Flags&^knownRequestFlags != 0:
		return h, protoErr("request seq %d: unknown flags %#x", h.Seq, h.Flags&^knownRequestFlags)
	case h.Seq == 0:
		return h, protoErr("request: sequence number 0 is reserved")
	}
	return h, nil
}

// ReplyKind says what a server frame is.
type ReplyKind uint16

const (
	// KindReply answers the request with the same Seq.
	KindReply ReplyKind = 1
	// KindAck only reports Executed (Seq is 0).
	KindAck ReplyKind = 2
	// KindMoved tells the client its session now lives at the address in
	// the payload; the client reconnects there. Sent at a frame boundary
	// on a quiesced connection, and nothing follows it.
	KindMoved ReplyKind = 3
	// KindClosing carries, as its payload, why the server is closing the
	// connection (a protocol error). Nothing follows it.
	KindClosing ReplyKind = 4
	// KindKeepalive says the server is alive and busy with the client's
	// work: sent, to clients that asked (HelloKeepalive), on a connection
	// that has been silent for the Welcome's keepalive interval while a
	// call runs or while gpud holds the connection of a quiesced session.
	// No payload; Executed is the worker's count, or 0 from gpud.
	KindKeepalive ReplyKind = 5
)

// ReplyHeader opens every server frame after the Welcome.
//
//	off size
//	0   4    Len: bytes of the payload (outputs) that follow
//	4   2    Kind
//	6   2    Flags (0)
//	8   4    Result: a CUresult
//	12  4    reserved (0)
//	16  8    Seq of the request answered (0 for acks and notices)
//	24  8    Executed: highest seq the session has executed (piggybacked ack)
//	32  8    Bulk: bytes of bulk payload after the outputs
type ReplyHeader struct {
	Len      uint32
	Kind     ReplyKind
	Flags    uint16
	Result   uint32
	Seq      uint64
	Executed uint64
	Bulk     uint64
}

// Put encodes h into b[:ReplyHeaderSize].
func (h *ReplyHeader) Put(b []byte) {
	_ = b[ReplyHeaderSize-1]
	le.PutUint32(b[0:], h.Len)
	le.PutUint16(b[4:], uint16(h.Kind))
	le.PutUint16(b[6:], h.Flags)
	le.PutUint32(b[8:], h.Result)
	le.PutUint32(b[12:], 0)
	le.PutUint64(b[16:], h.Seq)
	le.PutUint64(b[24:], h.Executed)
	le.PutUint64(b[32:], h.Bulk)
}

// DecodeReplyHeader decodes and validates a reply header.
func DecodeReplyHeader(b []byte, maxFrame uint32) (ReplyHeader, error) {
	if len(b) < ReplyHeaderSize {
		return ReplyHeader{}, protoErr("reply header: %d bytes, want %d", len(b), ReplyHeaderSize)
	}
	h := ReplyHeader{
		Len:      le.Uint32(b[0:]),
		Kind:     ReplyKind(le.Uint16(b[4:])),
		Flags:    le.Uint16(b[6:]),
		Result:   le.Uint32(b[8:]),
		Seq:      le.Uint64(b[16:]),
		Executed: le.Uint64(b[24:]),
		Bulk:     le.Uint64(b[32:]),
	}
	switch {
	case h.Kind < KindReply || h.Kind > KindKeepalive:
		return h, protoErr("reply: unknown kind %d", h.Kind)
	case h.Len > maxFrame:
		return h, protoErr("reply seq %d: payload of %d bytes exceeds the maximum frame of %d", h.Seq, h.Len, maxFrame)
	case h.Bulk > MaxBulk:
		return h, protoErr("reply seq %d: bulk of %d bytes exceeds %d", h.Seq, h.Bulk, uint64(MaxBulk))
	}
	return h, nil
}

// WriteMoved writes the "moved to ADDR" notice. gpud sends it on a
// quiesced connection, at a frame boundary, before closing it.
func WriteMoved(w io.Writer, addr string) error {
	if addr == "" || len(addr) > MaxMessageLen {
		return fmt.Errorf("write moved notice: address %q is empty or longer than %d bytes", addr, MaxMessageLen)
	}
	return writeNotice(w, KindMoved, addr)
}

// WriteClosing writes a Closing notice with reason, best effort before the
// server drops a connection for a protocol error.
func WriteClosing(w io.Writer, reason string) error {
	if len(reason) > MaxMessageLen {
		reason = reason[:MaxMessageLen]
	}
	return writeNotice(w, KindClosing, reason)
}

// WriteKeepalive writes a keepalive frame carrying executed.
func WriteKeepalive(w io.Writer, executed uint64) error {
	var b [ReplyHeaderSize]byte
	h := ReplyHeader{Kind: KindKeepalive, Executed: executed}
	h.Put(b[:])
	_, err := w.Write(b[:])
	return err
}

func writeNotice(w io.Writer, k ReplyKind, payload string) error {
	b := make([]byte, ReplyHeaderSize+len(payload))
	h := ReplyHeader{Len: uint32(len(payload)), Kind: k}
	h.Put(b)
	copy(b[ReplyHeaderSize:], payload)
	_, err := w.Write(b)
	return err
}
