package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
)

// The control connection between gpud and a worker is a unix
// SOCK_SEQPACKET socket: one JSON message per packet, so there is no
// framing to get wrong, and a client socket travels as SCM_RIGHTS
// ancillary data on the packet that asks the worker to serve it.

// Operations gpud asks of a worker.
const (
	opAttach  = "attach"  // serve the passed socket
	opQuiesce = "quiesce" // stop at a frame boundary, suspend, drop the socket
	opResume  = "resume"  // undo quiesce; serve the passed socket, if any
	opDetach  = "detach"  // drop the control connection, wait for SIGUSR2
	opStats   = "stats"   // report counters
	opExit    = "exit"    // release the device and exit 0
	opClaim   = "claim"   // move to the next epoch of the session
	// opMemSave copies the session's device memory into a memfd sent
	// back with the reply (package devmem); opMemReload copies it back
	// from the memfd passed.
	opMemSave   = "memsave"
	opMemReload = "memreload"
	// opMemPatch copies only the blocks MemPatch marks from the memfd
	// passed into memory that holds an earlier save of the same regions
	// (a migration's target restored the session ahead of its freeze).
	opMemPatch = "mempatch"
	// opMemPrecopy copies, while the session runs, the device memory
	// that changed since the previous round into a memfd sent back with
	// the reply (a live migration's pre-copy).
	opMemPrecopy = "memprecopy"
	// opMemPark parks the session's device memory (devmem.Tracker.Park):
	// the reply carries the descriptors that hold it; opMemUnpark maps it
	// back from the descriptors passed.
	opMemPark   = "mempark"
	opMemUnpark = "memunpark"
	// opReuse asks the quiesced worker whether it is, but for its device
	// memory and its protocol state, what it was when dumped for the
	// nonce given; if so the reply carries that protocol state in a
	// memfd (reuse.go). opImport puts such a state into a worker restored
	// from that dump.
	opReuse  = "reuse"
	opImport = "import"
)

// evEnded is the worker's unsolicited report that its client went away
// (not because gpud quiesced it).
const evEnded = "ended"

// evLog carries one of the worker's log records.
const evLog = "log"

// maxPacket bounds one control message.
const maxPacket = 64 << 10

type request struct {
	ID      uint64                `json:"id"`
	Op      string                `json:"op"`
	Welcome *dispatch.WelcomeInfo `json:"welcome,omitempty"`
	Resume  bool                  `json:"resume,omitempty"`
	Nonce   string                `json:"nonce,omitempty"`
	// ModuleCache names the host's module cache; it comes with attach
	// and resume, from whichever host the worker runs on now.
	ModuleCache *moduleCache `json:"module_cache,omitempty"`
	// Quota, on attach and resume, names gpud's quota service (see
	// QuotaAddr) when the session's tenant has a device memory limit;
	// empty: the session is not metered.
	Quota string `json:"quota,omitempty"`
	// TLS is the passed socket's TLS record layer (attach, resume); nil
	// for a plaintext connection.
	TLS *tlsrec.State `json:"tls,omitempty"`
	// MemSave asks for a save of device memory (memsave); MemLayout is
	// where the passed memfd holds its layout (memreload).
	MemSave   *devmem.SaveRequest `json:"mem_save,omitempty"`
	MemLayout *[2]int64           `json:"mem_layout,omitempty"`
	// MemPatch marks, one bit per block, what a mempatch copies.
	MemPatch []byte `json:"mem_patch,omitempty"`
	// MemPrecopy asks for a pre-copy round (memprecopy).
	MemPrecopy *devmem.PrecopyRequest `json:"mem_precopy,omitempty"`
	// MemUnpark maps parked memory back (memunpark).
	MemUnpark *devmem.UnparkRequest `json:"mem_unpark,omitempty"`
	// Files counts the descriptors that travel with the message, on its
	// packet and the ones that follow it (see sendFiles), when more than
	// one does.
	Files int `json:"files,omitempty"`
	// Epoch is the session's current epoch, which an attach or resume
	// must hand the worker; From and To move a claim.
	Epoch uint64 `json:"epoch,omitempty"`
	From  uint64 `json:"from,omitempty"`
	To    uint64 `json:"to,omitempty"`
}

// moduleCache is the host's module cache as a worker is told of it.
type moduleCache struct {
	Dir   string `json:"dir"`
	Bytes int64  `json:"bytes"`
}

type reply struct {
	ID    uint64 `json:"id"` // 0 for an event
	Event string `json:"event,omitempty"`
	Err   string `json:"err,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	// Boundary answers a quiesce: the client connection stopped at a
	// frame boundary (or there was none being served).
	Boundary bool `json:"boundary,omitempty"`
	// Dropped answers a resume: the passed client socket was not served
	// on, because the connection had not stopped at a frame boundary.
	Dropped bool       `json:"dropped,omitempty"`
	Stats   *Stats     `json:"stats,omitempty"`
	Log     *LogRecord `json:"log,omitempty"`
	// TLS hands a quiesced client's TLS record layer back to gpud, which
	// holds the socket until a worker serves it again.
	TLS *tlsrec.State `json:"tls,omitempty"`
	// Mem describes the memfd a memsave reply carries.
	Mem *devmem.Saved `json:"mem,omitempty"`
	// Parked describes the descriptors a mempark reply carries.
	Parked *devmem.Parked `json:"parked,omitempty"`
	// Reason answers a reuse that cannot be: why not; State marks the
	// answer of one that can, which carries the protocol state's memfd.
	Reason string `json:"reason,omitempty"`
	State  bool   `json:"state,omitempty"`
	Files  int    `json:"files,omitempty"`
	// Goodbye marks an ended event whose client said goodbye (its
	// program exited); Epoch is the worker's epoch then.
	Goodbye bool   `json:"goodbye,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`

	file  *os.File   // the descriptor the reply carried, if any
	files []*os.File // all of them, for a reply that carries several
}

// LogRecord is a worker log line forwarded to gpud.
type LogRecord struct {
	Level string            `json:"level"`
	Msg   string            `json:"msg"`
	Attrs map[string]string `json:"attrs,omitempty"`
}

// Stats are a worker's counters.
type Stats struct {
	// MemInUse is the device memory the session holds, as its backend
	// counts it (the emulated device counts module globals too), or
	// AllocBytes where the backend does not count.
	MemInUse uint64 `json:"mem_in_use"`
	Serving  bool   `json:"serving"`
	Executed uint64 `json:"executed"`
	// AllocBytes is what the client's allocations hold (cuMemAlloc,
	// memory pools, VMM; see meter): what a tenant's device memory limit
	// counts.
	AllocBytes uint64 `json:"alloc_bytes"`
	// BytesIn and BytesOut count what the worker read from and wrote to
	// its clients, over the session's life.
	BytesIn  uint64 `json:"bytes_in"`
	BytesOut uint64 `json:"bytes_out"`
	// SessionID and SecretSHA256 are the identity the worker was given
	// with its first client. They travel inside a checkpoint image, so a
	// host that restores the worker learns from it which secret a
	// reconnecting client must present.
	SessionID    string `json:"session_id,omitempty"`
	SecretSHA256 []byte `json:"secret_sha256,omitempty"`
	// Epoch is the epoch of the session this worker serves under (0: none
	// handed yet); see Handle.Claim.
	Epoch uint64 `json:"epoch,omitempty"`
}

// maxFDs is how many descriptors one packet carries (the kernel takes
// at most 253).
const maxFDs = 250

// sendMsg writes v as one packet, with fd attached when fd >= 0.
func sendMsg(c *net.UnixConn, v any, fd int) error {
	if fd < 0 {
		return sendFiles(c, v, nil)
	}
	return sendFiles(c, v, []int{fd})
}

// more is the body of the packets that carry a message's descriptors
// beyond its first maxFDs.
type more struct {
	More bool `json:"more"`
}

// sendFiles writes v with fds: the first maxFDs on v's own packet, the
// rest on packets right after it. v must count them in its Files field
// when there are more than one. Writers of one connection must not
// interleave (the worker's and the handle's sendMu).
func sendFiles(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxPacket {
		return fmt.Errorf("control message of %d bytes exceeds %d", len(b), maxPacket)
	}
	for first := true; first || len(fds) > 0; first = false {
		var oob []byte
		if k := min(len(fds), maxFDs); k > 0 {
			oob = unix.UnixRights(fds[:k]...)
			fds = fds[k:]
		}
		if !first {
			b = []byte(`{"more":true}`)
		}
		n, oobn, err := c.WriteMsgUnix(b, oob, nil)
		if err != nil {
			return err
		}
		if n != len(b) || oobn != len(oob) {
			return errors.New("short write on the control connection")
		}
	}
	return nil
}

// counted is the Files field of a message, read before the message
// itself.
type counted struct {
	Files int `json:"files"`
}

// recvPacket reads one packet: its bytes and the descriptors it carried.
func recvPacket(c *net.UnixConn) ([]byte, []*os.File, error) {
	buf := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(4*(maxFDs+3)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 && oobn == 0 {
		return nil, nil, net.ErrClosed // the peer closed a SOCK_SEQPACKET socket
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("control message: %w", err)
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range got {
				unix.CloseOnExec(fd)
				files = append(files, os.NewFile(uintptr(fd), "control"))
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		closeFiles(files)
		return nil, nil, errors.New("control message truncated")
	}
	return buf[:n], files, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// recvMsg reads one message into v and returns the descriptors it
// carried, reading the packets that carry the ones beyond the first
// packet's (sendFiles).
func recvMsg(c *net.UnixConn, v any) ([]*os.File, error) {
	b, files, err := recvPacket(c)
	if err != nil {
		return nil, err
	}
	var cnt counted
	_ = json.Unmarshal(b, &cnt)
	for len(files) < cnt.Files {
		mb, more, err := recvPacket(c)
		if err == nil && !isMore(mb) {
			err = errors.New("control message: descriptors missing")
		}
		files = append(files, more...)
		if err != nil {
			closeFiles(files)
			return nil, err
		}
	}
	if err := json.Unmarshal(b, v); err != nil {
		closeFiles(files)
		return nil, fmt.Errorf("control message: %w", err)
	}
	return files, nil
}

func isMore(b []byte) bool {
	var m more
	return json.Unmarshal(b, &m) == nil && m.More
}
