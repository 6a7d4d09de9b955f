// Package tlsrec is the TLS 1.3 record layer of a client connection that
// one process accepts and another serves.
//
// gpud runs the TLS handshake on --listen with crypto/tls (Server), then
// hands the client's socket to the session's worker over SCM_RIGHTS. A
// crypto/tls connection cannot travel with the socket, so this package
// keeps what the record layer needs after the handshake as plain data
// (State: the cipher suite, each direction's traffic secret and sequence
// number, and bytes already read from the socket) and runs the record
// layer itself (Conn): AES-GCM or ChaCha20-Poly1305 over the descriptor,
// in whichever process holds it. Where the kernel offers TLS offload
// (kTLS), Conn.Offload installs the keys in the socket instead; both
// processes then read and write plaintext and the kernel does the rest.
//
// The handshake reads the socket one record at a time, so nothing past the
// client's Finished message is consumed by crypto/tls, and session tickets
// are disabled, so the server sends nothing after its Finished: both
// directions of application data start at sequence number 0 with the
// secrets the handshake logged (Config.KeyLogWriter, per connection).
// A peer's KeyUpdate is honoured; alerts end the connection (close_notify
// as io.EOF).
package tlsrec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"
)

// Record layer constants (RFC 8446, section 5).
const (
	headerLen     = 5
	maxPlaintext  = 1 << 14
	tagLen        = 16
	maxCiphertext = maxPlaintext + 256

	typeChangeCipherSpec = 20
	typeAlert            = 21
	typeHandshake        = 22
	typeApplicationData  = 23

	handshakeKeyUpdate = 24
)

// State is the record layer of one TLS 1.3 connection between records:
// everything a process needs to carry on the connection on a socket it
// was handed. It travels as JSON on gpud's control socket to its worker,
// so it holds secrets: never log it.
type State struct {
	// Suite is the negotiated cipher suite (tls.TLS_AES_128_GCM_SHA256 and
	// so on).
	Suite uint16 `json:"suite"`
	// In is what the peer sends (the client's traffic), Out what this end
	// sends.
	In  Direction `json:"in"`
	Out Direction `json:"out"`
	// Pending is plaintext already decrypted and not yet read.
	Pending []byte `json:"pending,omitempty"`
	// Partial is bytes read from the socket that do not yet make a whole
	// record (after Conn.Drain, at most one record's worth).
	Partial []byte `json:"partial,omitempty"`
	// Err is set when reading has ended for good: "EOF" after the peer's
	// close_notify, else what went wrong (an alert, a broken record).
	Err string `json:"err,omitempty"`
}

// Direction is one direction's traffic keys.
type Direction struct {
	// Secret is the current traffic secret; key and IV derive from it.
	// Empty when Kernel is set: the kernel holds the keys.
	Secret []byte `json:"secret,omitempty"`
	// Seq is the sequence number of the next record.
	Seq uint64 `json:"seq"`
	// Kernel: the socket's kernel TLS does this direction (kTLS), so
	// plaintext is read or written on the socket as is.
	Kernel bool `json:"kernel,omitempty"`
}

// suite describes a TLS 1.3 cipher suite.
type suite struct {
	id     uint16
	keyLen int
	hash   func() hash.Hash
	size   int // hash output size: the length of traffic secrets
	aead   func(key []byte) (cipher.AEAD, error)
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

var suites = []suite{
	{tls.TLS_AES_128_GCM_SHA256, 16, sha256.New, sha256.Size, gcm},
	{tls.TLS_AES_256_GCM_SHA384, 32, sha512.New384, sha512.Size384, gcm},
	{tls.TLS_CHACHA20_POLY1305_SHA256, 32, sha256.New, sha256.Size, chacha20poly1305.New},
}

func suiteName(id uint16) string { return tls.CipherSuiteName(id) }

func suiteByID(id uint16) (*suite, error) {
	for i := range suites {
		if suites[i].id == id {
			return &suites[i], nil
		}
	}
	return nil, fmt.Errorf("tls: cipher suite %#04x is not a TLS 1.3 suite this record layer carries", id)
}

// expandLabel is HKDF-Expand-Label (RFC 8446, section 7.1) with an empty
// context.
func (s *suite) expandLabel(secret []byte, label string, n int) []byte {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = append(info, byte(n>>8), byte(n), byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // empty context
	out, err := hkdf.Expand(s.hash, secret, string(info), n)
	if err != nil {
		panic("tlsrec: HKDF-Expand-Label: " + err.Error()) // only for n > 255*hash size
	}
	return out
}

// keys derives a direction's AEAD and IV from its traffic secret.
func (s *suite) keys(secret []byte) (cipher.AEAD, [12]byte, error) {
	var iv [12]byte
	if len(secret) != s.size {
		return nil, iv, fmt.Errorf("tls: traffic secret of %d bytes for a suite whose secrets have %d", len(secret), s.size)
	}
	aead, err := s.aead(s.expandLabel(secret, "key", s.keyLen))
	if err != nil {
		return nil, iv, err
	}
	copy(iv[:], s.expandLabel(secret, "iv", 12))
	return aead, iv, nil
}

// nextSecret is the traffic secret after a KeyUpdate.
func (s *suite) nextSecret(secret []byte) []byte {
	return s.expandLabel(secret, "traffic upd", s.size)
}
