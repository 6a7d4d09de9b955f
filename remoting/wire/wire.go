// Package wire is gpuctl's client protocol: the handshake (Hello, Welcome),
// request and reply frames, and the little-endian argument codec shared by
// the worker's dispatch and, through generated C, the interposer.
//
// Every byte is documented in docs/protocol.md. In short: the client sends a
// Hello, the server answers a Welcome, and from then on the client sends
// request frames and the server sends reply frames. A frame is a fixed
// header, an argument block of at most the negotiated maximum frame size,
// and optionally a bulk payload whose length the header announces and which
// is streamed rather than buffered (copies, module images).
package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Version is the protocol version this package speaks. A peer with another
// version is refused with StatusVersionMismatch.
const Version = 1

// Magic numbers open the handshake messages so that a stray connection
// (an HTTP client on the wrong port) is refused at its first bytes.
var (
	HelloMagic   = [4]byte{'G', 'P', 'U', 'H'}
	WelcomeMagic = [4]byte{'G', 'P', 'U', 'W'}
)

// Limits on handshake fields. They bound what a server reads from an
// unauthenticated peer.
const (
	MaxTokenLen     = 512
	MaxSessionIDLen = 64
	MaxSecretLen    = 128
	MaxMessageLen   = 1024
	// MaxAttrsLen bounds the Hello's attributes: the priority and the
	// labels text (at most api.MaxLabelsBytes).
	MaxAttrsLen = 4 + 2048
)

// Frame size limits. The server announces its maximum argument-block size
// in the Welcome; DefaultMaxFrame is what gpud uses. Bulk payloads are
// bounded separately because they are streamed: MaxBulk bounds copies,
// MaxImage bounds a module image, which the backend needs in memory.
const (
	DefaultMaxFrame = 1 << 20
	MinMaxFrame     = 4 << 10
	MaxBulk         = 1 << 40
	MaxImage        = 512 << 20
)

// HelloSize and WelcomeSize are the fixed parts of the handshake messages.
const (
	HelloSize   = 24
	WelcomeSize = 32
)

// Hello flags.
const (
	// HelloResume asks to re-attach to SessionID, proving it with Secret.
	HelloResume uint16 = 1 << 0
	// HelloKeepalive says the client reads keepalive frames and gives up
	// on a connection that stays silent while it waits for a reply; the
	// server then sends a keepalive whenever it has been silent for the
	// interval its Welcome announces while the client has work in it.
	HelloKeepalive uint16 = 1 << 1
)

// DefaultKeepalive is how often gpud sends a keepalive on a connection
// whose client asked for them and that has been silent while a call runs
// (or while gpud holds the connection of a session being checkpointed).
const DefaultKeepalive = 2 * time.Second

// Hello is the client's first message.
type Hello struct {
	Version uint16
	Flags   uint16
	// Token is the host token that authenticates the client.
	Token string
	// SessionID and Secret identify the session to resume; both empty for
	// a new session.
	SessionID string
	Secret    string
	// LastSeq is the highest request sequence number the client has sent
	// (0 for a new session). It lets the server log how much is in flight.
	LastSeq uint64
	// Attrs are the new session's priority and labels (GPUCTL_PRIORITY,
	// GPUCTL_LABELS); a resume carries none, its session has them.
	Attrs Attrs
}

// Attrs are what a client says about its new session. On the wire they
// follow the secret, AttrsLen bytes (the Hello's u16 at offset 14, zero
// when there are none): the priority as an int32, then the labels as
// "k=v,k2=v2" text, which the session table checks.
type Attrs struct {
	Priority int32
	Labels   string
}

func (a Attrs) empty() bool { return a.Priority == 0 && a.Labels == "" }

// attrsCtxKey carries a Hello's attributes from the listener to the
// session table, next to the principal (package tenant) that the
// handshake's token named.
type attrsCtxKey struct{}

// NewAttrsContext returns ctx carrying a.
func NewAttrsContext(ctx context.Context, a Attrs) context.Context {
	return context.WithValue(ctx, attrsCtxKey{}, a)
}

// AttrsFromContext returns the attributes ctx carries (zero if none).
func AttrsFromContext(ctx context.Context) Attrs {
	a, _ := ctx.Value(attrsCtxKey{}).(Attrs)
	return a
}

// Resume reports whether the client asks to re-attach to a session.
func (h *Hello) Resume() bool { return h.Flags&HelloResume != 0 }

// ErrProtocol marks every malformed-input error of this package, so that a
// caller can tell a hostile or broken peer from an I/O failure.
var ErrProtocol = errors.New("protocol error")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrProtocol}, args...)...)
}

// ReadHello reads and validates one Hello. Field lengths are bounded before
// anything is allocated.
func ReadHello(r io.Reader) (*Hello, error) {
	var b [HelloSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	return decodeHello(b[:], r)
}

func decodeHello(b []byte, r io.Reader) (*Hello, error) {
	if [4]byte(b[0:4]) != HelloMagic {
		return nil, protoErr("hello: bad magic %q: the peer does not speak the gpuctl protocol", b[0:4])
	}
	h := &Hello{
		Version: le.Uint16(b[4:]),
		Flags:   le.Uint16(b[6:]),
		LastSeq: le.Uint64(b[16:]),
	}
	tl, sl, cl := int(le.Uint16(b[8:])), int(le.Uint16(b[10:])), int(le.Uint16(b[12:]))
	switch {
	case tl > MaxTokenLen:
		return nil, protoErr("hello: token of %d bytes exceeds %d", tl, MaxTokenLen)
	case sl > MaxSessionIDLen:
		return nil, protoErr("hello: session id of %d bytes exceeds %d", sl, MaxSessionIDLen)
	case cl > MaxSecretLen:
		return nil, protoErr("hello: secret of %d bytes exceeds %d", cl, MaxSecretLen)
	case int(le.Uint16(b[14:])) > MaxAttrsLen:
		return nil, protoErr("hello: attributes of %d bytes exceed %d", le.Uint16(b[14:]), MaxAttrsLen)
	case le.Uint16(b[14:]) != 0 && le.Uint16(b[14:]) < 4:
		return nil, protoErr("hello: attributes of %d bytes are shorter than the priority", le.Uint16(b[14:]))
	}
	al := int(le.Uint16(b[14:]))
	if h.Version != Version {
		// The variable part may have another layout in another version:
		// return what we know so the caller can answer with a Welcome.
		return h, fmt.Errorf("%w: hello: client speaks protocol version %d, this server speaks %d", ErrVersion, h.Version, Version)
	}
	rest := make([]byte, tl+sl+cl+al)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	h.Token = string(rest[:tl])
	h.SessionID = string(rest[tl : tl+sl])
	h.Secret = string(rest[tl+sl : tl+sl+cl])
	if al > 0 {
		a := rest[tl+sl+cl:]
		h.Attrs = Attrs{Priority: int32(le.Uint32(a)), Labels: string(a[4:])}
	}
	if h.Resume() && (h.SessionID == "" || h.Secret == "") {
		return nil, protoErr("hello: resume without session id and secret")
	}
	return h, nil
}

// ErrVersion is returned (wrapped) by ReadHello and ReadWelcome when the
// peer speaks another protocol version.
var ErrVersion = errors.New("protocol version mismatch")

// WriteHello writes h (the client side; used by tests and tools).
func WriteHello(w io.Writer, h *Hello) error {
	var attrs []byte
	if !h.Attrs.empty() {
		attrs = le.AppendUint32(nil, uint32(h.Attrs.Priority))
		attrs = append(attrs, h.Attrs.Labels...)
	}
	if len(h.Token) > MaxTokenLen || len(h.SessionID) > MaxSessionIDLen || len(h.Secret) > MaxSecretLen || len(attrs) > MaxAttrsLen {
		return fmt.Errorf("write hello: field too long")
	}
	b := make([]byte, HelloSize, HelloSize+len(h.Token)+len(h.SessionID)+len(h.Secret)+len(attrs))
	copy(b, HelloMagic[:])
	v := h.Version
	if v == 0 {
		v = Version
	}
	le.PutUint16(b[4:], v)
	le.PutUint16(b[6:], h.Flags)
	le.PutUint16(b[8:], uint16(len(h.Token)))
	le.PutUint16(b[10:], uint16(len(h.SessionID)))
	le.PutUint16(b[12:], uint16(len(h.Secret)))
	le.PutUint16(b[14:], uint16(len(attrs)))
	le.PutUint64(b[16:], h.LastSeq)
	b = append(b, h.Token...)
	b = append(b, h.SessionID...)
	b = append(b, h.Secret...)
	b = append(b, attrs...)
	_, err := w.Write(b)
	return err
}

// Status is the Welcome's verdict.
type Status uint16

const (
	StatusOK              Status = 0
	StatusBadToken        Status = 1 // the token is wrong; the client gives up
	StatusUnknownSession  Status = 2 // resume of a session this host does not have (any more)
	StatusVersionMismatch Status = 3
	StatusRefused         Status = 4 // refused for the reason in Message (e.g. no capacity)
	StatusMoved           Status = 5 // the session lives at Message (HOST:PORT); reconnect there
	// StatusTLSRequired answers a plaintext Hello on a listener that
	// serves TLS; it is the one Welcome sent unencrypted on such a
	// listener, so that the client can say what to change.
	StatusTLSRequired Status = 6
	// StatusPreempted answers the resume of a session that was preempted
	// (its device memory given to a session of higher priority) and waits
	// in its image: the client keeps trying, without the reconnect
	// timeout, until gpud resumes the session here or sends it elsewhere.
	StatusPreempted Status = 7
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusBadToken:
		return "bad token"
	case StatusUnknownSession:
		return "unknown session"
	case StatusVersionMismatch:
		return "version mismatch"
	case StatusRefused:
		return "refused"
	case StatusMoved:
		return "moved"
	case StatusTLSRequired:
		return "tls required"
	case StatusPreempted:
		return "preempted"
	}
	return fmt.Sprintf("status(%d)", uint16(s))
}

// Welcome is the server's answer to a Hello.
type Welcome struct {
	Status Status
	// SessionID and Secret name the session (the secret only for a new
	// session: a resuming client already has it).
	SessionID string
	Secret    string
	// Message is the refusal reason (StatusRefused and other failures) or
	// the new address (StatusMoved).
	Message string
	// MaxFrame is the largest argument block the server accepts.
	MaxFrame uint32
	// LastExecuted is the highest request sequence number the session has
	// executed; the client resends everything after it.
	LastExecuted uint64
	// Features are what the serving worker understands beyond the base
	// protocol (Feature* bits); 0 from an older server.
	Features uint16
	// KeepaliveMS is the interval, in milliseconds, of the keepalives the
	// server sends on this connection (HelloKeepalive); 0: none.
	KeepaliveMS uint32
}

// FeatureDeferredReplies in a Welcome's Features: the server takes
// FlagDeferred on device-to-host copies.
const FeatureDeferredReplies uint16 = 1 << 0

// FeatureGoodbye in a Welcome's Features: the server ends the session
// when the client says goodbye (OpGoodbye), so a client that exits
// sends it; an older server would only fail it.
const FeatureGoodbye uint16 = 1 << 1

// WriteWelcome writes wl. A zero MaxFrame is sent as DefaultMaxFrame.
func WriteWelcome(w io.Writer, wl *Welcome) error {
	if len(wl.SessionID) > MaxSessionIDLen || len(wl.Secret) > MaxSecretLen {
		return fmt.Errorf("write welcome: session id or secret too long")
	}
	msg := wl.Message
	if len(msg) > MaxMessageLen {
		msg = msg[:MaxMessageLen]
	}
	mf := wl.MaxFrame
	if mf == 0 {
		mf = DefaultMaxFrame
	}
	b := make([]byte, WelcomeSize, WelcomeSize+len(wl.SessionID)+len(wl.Secret)+len(msg))
	copy(b, WelcomeMagic[:])
	le.PutUint16(b[4:], Version)
	le.PutUint16(b[6:], uint16(wl.Status))
	le.PutUint16(b[8:], uint16(len(wl.SessionID)))
	le.PutUint16(b[10:], uint16(len(wl.Secret)))
	le.PutUint16(b[12:], uint16(len(msg)))
	le.PutUint16(b[14:], wl.Features)
	le.PutUint32(b[16:], mf)
	le.PutUint32(b[20:], wl.KeepaliveMS)
	le.PutUint64(b[24:], wl.LastExecuted)
	b = append(b, wl.SessionID...)
	b = append(b, wl.Secret...)
	b = append(b, msg...)
	_, err := w.Write(b)
	return err
}

// ReadWelcome reads one Welcome (the client side).
func ReadWelcome(r io.Reader) (*Welcome, error) {
	var b [WelcomeSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return nil, fmt.Errorf("read welcome: %w", err)
	}
	if [4]byte(b[0:4]) != WelcomeMagic {
		return nil, protoErr("welcome: bad magic %q", b[0:4])
	}
	if v := le.Uint16(b[4:]); v != Version {
		return nil, fmt.Errorf("%w: welcome: server speaks protocol version %d, this client speaks %d", ErrVersion, v, Version)
	}
	wl := &Welcome{
		Status:       Status(le.Uint16(b[6:])),
		MaxFrame:     le.Uint32(b[16:]),
		KeepaliveMS:  le.Uint32(b[20:]),
		LastExecuted: le.Uint64(b[24:]),
		Features:     le.Uint16(b[14:]),
	}
	sl, cl, ml := int(le.Uint16(b[8:])), int(le.Uint16(b[10:])), int(le.Uint16(b[12:]))
	if sl > MaxSessionIDLen || cl > MaxSecretLen || ml > MaxMessageLen {
		return nil, protoErr("welcome: field lengths %d/%d/%d exceed limits", sl, cl, ml)
	}
	if wl.MaxFrame < MinMaxFrame {
		return nil, protoErr("welcome: max frame %d below %d", wl.MaxFrame, MinMaxFrame)
	}
	rest := make([]byte, sl+cl+ml)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("read welcome: %w", err)
	}
	wl.SessionID = string(rest[:sl])
	wl.Secret = string(rest[sl : sl+cl])
	wl.Message = string(rest[sl+cl:])
	return wl, nil
}

var le = binary.LittleEndian
