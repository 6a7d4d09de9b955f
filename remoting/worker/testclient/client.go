// Package testclient is a minimal Go speaker of the client side of the
// wire protocol, for tests and benchmarks of gpud and its workers that do
// not go through the C interposer.
package testclient

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// Client is one connection to a session.
type Client struct {
	Conn    net.Conn
	Welcome *wire.Welcome
	r       *bufio.Reader
	seq     uint64
}

// Dial connects to a gpud --listen address and runs the handshake. A
// refusal is returned as an error together with the Welcome that carried
// it.
func Dial(addr string, hello wire.Hello, timeout time.Duration) (*Client, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	cl, err := Handshake(c, hello, timeout)
	if err != nil {
		c.Close()
		return cl, err
	}
	return cl, nil
}

// Handshake sends hello on c and reads the Welcome.
func Handshake(c net.Conn, hello wire.Hello, timeout time.Duration) (*Client, error) {
	if err := wire.WriteHello(c, &hello); err != nil {
		return nil, err
	}
	return Greeted(c, timeout)
}

// Greeted reads the Welcome a worker sends on a connection handed to it
// directly.
func Greeted(c net.Conn, timeout time.Duration) (*Client, error) {
	cl := &Client{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	w, err := wire.ReadWelcome(cl.r)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, err
	}
	cl.Welcome = w
	cl.seq = w.LastExecuted
	if w.Status != wire.StatusOK {
		return cl, fmt.Errorf("refused: %s: %s", w.Status, w.Message)
	}
	return cl, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.Conn.Close() }

// Args encodes arguments little-endian, as the generated stubs do.
type Args struct{ wire.Enc }

// Send writes one request without waiting; async marks it as such.
func (c *Client) Send(op wire.Op, args []byte, bulk []byte, async bool) (uint64, error) {
	c.seq++
	h := wire.RequestHeader{Len: uint32(len(args)), Op: op, Seq: c.seq, Bulk: uint64(len(bulk))}
	if async {
		h.Flags = wire.FlagAsync
	}
	b := make([]byte, wire.RequestHeaderSize, wire.RequestHeaderSize+len(args))
	h.Put(b)
	b = append(b, args...)
	if _, err := c.Conn.Write(b); err != nil {
		return 0, err
	}
	if len(bulk) > 0 {
		if _, err := c.Conn.Write(bulk); err != nil {
			return 0, err
		}
	}
	return c.seq, nil
}

// Reply is one answer.
type Reply struct {
	Result cu.Result
	Out    []byte
	Bulk   []byte
}

// Call sends a synchronous request and waits for its reply, skipping
// acks. A CUDA failure is in Reply.Result, not the error.
func (c *Client) Call(op wire.Op, args []byte, bulk []byte) (Reply, error) {
	seq, err := c.Send(op, args, bulk, false)
	if err != nil {
		return Reply{}, err
	}
	for {
		var hb [wire.ReplyHeaderSize]byte
		if _, err := io.ReadFull(c.r, hb[:]); err != nil {
			return Reply{}, err
		}
		h, err := wire.DecodeReplyHeader(hb[:], 1<<30)
		if err != nil {
			return Reply{}, err
		}
		out := make([]byte, h.Len)
		if _, err := io.ReadFull(c.r, out); err != nil {
			return Reply{}, err
		}
		var bulkOut []byte
		if h.Bulk > 0 {
			bulkOut = make([]byte, h.Bulk)
			if _, err := io.ReadFull(c.r, bulkOut); err != nil {
				return Reply{}, err
			}
		}
		switch h.Kind {
		case wire.KindAck, wire.KindKeepalive:
			continue
		case wire.KindMoved, wire.KindClosing:
			return Reply{}, fmt.Errorf("server notice %d: %s", h.Kind, out)
		}
		if h.Seq != seq {
			return Reply{}, fmt.Errorf("reply for seq %d, want %d", h.Seq, seq)
		}
		return Reply{Result: cu.Result(h.Result), Out: out, Bulk: bulkOut}, nil
	}
}

// DeviceCount is cuDeviceGetCount.
func (c *Client) DeviceCount() (int32, error) {
	r, err := c.Call(wire.OpDeviceCount, nil, nil)
	if err != nil {
		return 0, err
	}
	if r.Result != cu.Success {
		return 0, r.Result
	}
	return int32(binary.LittleEndian.Uint32(r.Out)), nil
}

// PrimaryCtxRetain is cuDevicePrimaryCtxRetain.
func (c *Client) PrimaryCtxRetain(dev int32) (uint64, error) {
	var a Args
	a.I32(dev)
	return c.u64(wire.OpPrimaryCtxRetain, a.B, nil)
}

// MemAlloc is cuMemAlloc in context ctx.
func (c *Client) MemAlloc(ctx, size uint64) (uint64, error) {
	var a Args
	a.U64(ctx)
	a.U64(size)
	return c.u64(wire.OpMemAlloc, a.B, nil)
}

// MemGetInfo is cuMemGetInfo.
func (c *Client) MemGetInfo(ctx uint64) (free, total uint64, err error) {
	var a Args
	a.U64(ctx)
	r, err := c.Call(wire.OpMemGetInfo, a.B, nil)
	if err != nil {
		return 0, 0, err
	}
	if r.Result != cu.Success {
		return 0, 0, r.Result
	}
	return binary.LittleEndian.Uint64(r.Out), binary.LittleEndian.Uint64(r.Out[8:]), nil
}

// MemcpyHtoD copies data to device address dst on the default stream.
func (c *Client) MemcpyHtoD(ctx, dst uint64, data []byte) error {
	var a Args
	a.U64(ctx)
	a.U64(dst)
	a.U64(uint64(len(data)))
	a.U64(0)
	r, err := c.Call(wire.OpMemcpyHtoD, a.B, data)
	if err != nil {
		return err
	}
	if r.Result != cu.Success {
		return r.Result
	}
	return nil
}

// MemcpyDtoH copies n bytes from device address src.
func (c *Client) MemcpyDtoH(ctx, src, n uint64) ([]byte, error) {
	var a Args
	a.U64(ctx)
	a.U64(src)
	a.U64(n)
	a.U64(0)
	r, err := c.Call(wire.OpMemcpyDtoH, a.B, nil)
	if err != nil {
		return nil, err
	}
	if r.Result != cu.Success {
		return nil, r.Result
	}
	return r.Bulk, nil
}

func (c *Client) u64(op wire.Op, args, bulk []byte) (uint64, error) {
	r, err := c.Call(op, args, bulk)
	if err != nil {
		return 0, err
	}
	if r.Result != cu.Success {
		return 0, r.Result
	}
	if len(r.Out) < 8 {
		return 0, fmt.Errorf("%s: reply of %d bytes", op, len(r.Out))
	}
	return binary.LittleEndian.Uint64(r.Out), nil
}
