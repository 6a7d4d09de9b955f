package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/errs"
)

// Device-memory quotas. A tenant's limit covers all of its sessions on a
// host, and each session runs in a worker of its own, so no worker can
// decide alone: before a metered worker holds more device memory than
// gpud last granted it, it asks. gpud answers from its ledger (the
// session table), where every metered session's holding is kept.
//
// The question travels on a connection of its own, not the control
// socket: an allocation waits for the answer on the worker's call thread,
// and the control socket's reader may at that moment be waiting for that
// very thread (a quiesce). The worker dials gpud's abstract unix socket
// (@gpuctl-quota-<random>, its name given with attach and resume), and
// gpud tells workers apart by their PID (SO_PEERCRED), so no other
// process can hold a session's memory. The worker hangs up when it is
// quiesced: a process CRIU dumps holds no socket, and a restored worker
// dials the gpud that restored it.
//
// One JSON message per SOCK_SEQPACKET packet: quotaRequest, then
// quotaReply.

// quotaRequest asks to hold Hold bytes in all: more than before for an
// allocation, less to give memory back, the same to ask how much is left.
type quotaRequest struct {
	Hold uint64 `json:"hold"`
}

// QuotaGrant is gpud's answer to a worker's request.
type QuotaGrant struct {
	// OK: the worker may now hold what it asked for. A request to hold
	// less is always granted.
	OK bool `json:"ok"`
	// Limit is the tenant's max_mem_bytes; Held what its sessions on
	// this host hold in all after the request.
	Limit uint64 `json:"limit"`
	Held  uint64 `json:"held"`
	// Reason says why a request was refused.
	Reason string `json:"reason,omitempty"`
}

// Ledger is gpud's account of metered device memory. Hold sets what the
// worker with that PID holds, if the tenant's limit allows it.
type Ledger interface {
	Hold(pid int, bytes uint64) QuotaGrant
}

// quotaPacket bounds one quota message, both ways.
const quotaPacket = 4 << 10

// quotaTimeout bounds one question. gpud answers from memory, unless
// the device is full and it first preempts sessions of lower priority
// (checkpoints that take seconds, minutes for tens of GiB on a GPU); it
// bounds that wait itself (session.makeRoomTimeout).
const quotaTimeout = 6 * time.Minute

// QuotaAddr is the abstract unix socket of a quota service.
func QuotaAddr(name string) *net.UnixAddr {
	return &net.UnixAddr{Name: "@gpuctl-quota-" + name, Net: "unixpacket"}
}

// QuotaServer is gpud's side: it answers metered workers from a Ledger.
type QuotaServer struct {
	ln   *net.UnixListener
	name string
	wg   sync.WaitGroup
}

// ListenQuota opens a quota service on a fresh abstract socket name.
func ListenQuota() (*QuotaServer, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	name := hex.EncodeToString(b[:])
	ln, err := net.ListenUnix("unixpacket", QuotaAddr(name))
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, "", "listen for workers' quota requests")
	}
	return &QuotaServer{ln: ln, name: name}, nil
}

// Name is what a worker is told to dial (see QuotaAddr).
func (q *QuotaServer) Name() string { return q.name }

// Serve answers workers until ctx ends, then closes the listener and
// waits for the connections to end.
func (q *QuotaServer) Serve(ctx context.Context, ledger Ledger, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stop := context.AfterFunc(ctx, func() { q.ln.Close() })
	defer stop()
	var mu sync.Mutex
	conns := map[*net.UnixConn]bool{}
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		q.wg.Wait()
	}()
	for {
		c, err := q.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Warn("quota service stopped", "err", err)
			}
			return
		}
		mu.Lock()
		conns[c] = true
		mu.Unlock()
		q.wg.Add(1)
		go func() {
			defer q.wg.Done()
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			q.serveConn(c, ledger, log)
		}()
	}
}

// Close stops accepting workers.
func (q *QuotaServer) Close() error { return q.ln.Close() }

func (q *QuotaServer) serveConn(c *net.UnixConn, ledger Ledger, log *slog.Logger) {
	pid, err := peerPID(c)
	if err != nil {
		log.Warn("quota request from a process gpud cannot identify", "err", err)
		return
	}
	buf := make([]byte, quotaPacket)
	for {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var req quotaRequest
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			log.Warn("malformed quota request", "pid", pid, "err", err)
			return
		}
		b, err := json.Marshal(ledger.Hold(pid, req.Hold))
		if err != nil {
			return
		}
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// peerPID is the PID, in gpud's namespace, of the process that dialled c.
func peerPID(c *net.UnixConn) (int, error) {
	var pid int
	err := withConnFD(c, func(fd int) error {
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return err
		}
		pid = int(cred.Pid)
		return nil
	})
	return pid, err
}

// quotaClient is the worker's side: one connection to gpud's quota
// service, dialled when first needed.
type quotaClient struct {
	name string
	conn *net.UnixConn
}

// ask sends one request and waits for the answer.
func (q *quotaClient) ask(hold uint64) (QuotaGrant, error) {
	if q.conn == nil {
		c, err := net.DialUnix("unixpacket", nil, QuotaAddr(q.name))
		if err != nil {
			return QuotaGrant{}, fmt.Errorf("reach gpud's quota service: %w", err)
		}
		q.conn = c
	}
	g, err := q.exchange(hold)
	if err != nil {
		q.close()
	}
	return g, err
}

func (q *quotaClient) exchange(hold uint64) (QuotaGrant, error) {
	_ = q.conn.SetDeadline(time.Now().Add(quotaTimeout))
	b, _ := json.Marshal(quotaRequest{Hold: hold})
	if _, err := q.conn.Write(b); err != nil {
		return QuotaGrant{}, fmt.Errorf("ask gpud's quota service: %w", err)
	}
	buf := make([]byte, quotaPacket)
	n, err := q.conn.Read(buf)
	if err != nil || n == 0 {
		return QuotaGrant{}, fmt.Errorf("gpud's quota service did not answer: %w", orClosed(err))
	}
	var g QuotaGrant
	if err := json.Unmarshal(buf[:n], &g); err != nil {
		return QuotaGrant{}, fmt.Errorf("gpud's quota answer: %w", err)
	}
	return g, nil
}

func (q *quotaClient) close() {
	if q.conn != nil {
		q.conn.Close()
		q.conn = nil
	}
}
