package tlsrec

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Kernel TLS (linux/tls.h). x/sys/unix has SOL_TLS and TCP_ULP but not
// these.
const (
	tlsTX            = 1
	tlsRX            = 2
	tlsRXExpectNoPad = 4
	tls13Version     = 0x0304

	cipherAESGCM128        = 51
	cipherAESGCM256        = 52
	cipherChaCha20Poly1305 = 54
)

// Offload moves the record layer into the socket's kernel TLS (kTLS)
// where the kernel has it, so that both processes that hold the socket
// read and write plaintext on it and the kernel encrypts. It reports
// which directions moved: sending moves whenever the kernel takes the
// suite; receiving only when no bytes past a record boundary have been
// read (always so right after Server). Where the kernel has no TLS, it
// returns an error and the Conn carries on in user space.
func (c *Conn) Offload() (tx, rx bool, err error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	sc, ok := c.nc.(syscall.Conn)
	if !ok {
		return false, false, errors.New("tls: kernel TLS needs a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false, err
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		if c.in.kernel || c.out.kernel {
			return // the ULP is installed already
		}
		if err := unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_ULP, "tls"); err != nil {
			serr = fmt.Errorf("tls: the kernel has no TLS offload (TCP_ULP \"tls\": %w)", err)
			return
		}
		if err := c.install(int(fd), tlsTX, &c.out); err != nil {
			serr = err
			return
		}
		tx = true
		if c.rpos != len(c.raw) {
			return
		}
		if err := c.install(int(fd), tlsRX, &c.in); err != nil {
			serr = err
			return
		}
		rx = true
		// Neither end pads its records: let the kernel decrypt in place.
		_ = unix.SetsockoptInt(int(fd), unix.SOL_TLS, tlsRXExpectNoPad, 1)
	})
	if cerr != nil {
		return tx, rx, cerr
	}
	return tx, rx, serr
}

// install gives the kernel one direction's keys and forgets them here.
func (c *Conn) install(fd, dir int, h *half) error {
	info, err := c.cryptoInfo(h)
	if err != nil {
		return err
	}
	err = unix.SetsockoptString(fd, unix.SOL_TLS, dir, string(info))
	clear(info)
	if err != nil {
		what := "sending"
		if dir == tlsRX {
			what = "receiving"
		}
		return fmt.Errorf("tls: the kernel refused %s keys for %s: %w", what, suiteName(c.suite.id), err)
	}
	clear(h.secret)
	h.secret, h.aead, h.kernel = nil, nil, true
	return nil
}

// cryptoInfo is struct tls12_crypto_info_* for one direction: TLS 1.3
// splits the 12-byte IV into a 4-byte salt and 8 bytes of "iv" for
// AES-GCM; ChaCha20-Poly1305 takes all 12 as its iv.
func (c *Conn) cryptoInfo(h *half) ([]byte, error) {
	s := c.suite
	key := s.expandLabel(h.secret, "key", s.keyLen)
	defer clear(key)
	iv := h.iv
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], h.seq)
	b := binary.NativeEndian.AppendUint16(nil, tls13Version)
	switch s.id {
	case tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384:
		ct := uint16(cipherAESGCM128)
		if s.id == tls.TLS_AES_256_GCM_SHA384 {
			ct = cipherAESGCM256
		}
		b = binary.NativeEndian.AppendUint16(b, ct)
		b = append(b, iv[4:]...)
		b = append(b, key...)
		b = append(b, iv[:4]...)
	case tls.TLS_CHACHA20_POLY1305_SHA256:
		b = binary.NativeEndian.AppendUint16(b, cipherChaCha20Poly1305)
		b = append(b, iv[:]...)
		b = append(b, key...)
	default:
		return nil, fmt.Errorf("tls: no kernel offload for %s", suiteName(s.id))
	}
	return append(b, seq[:]...), nil
}
