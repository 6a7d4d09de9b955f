package worker

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSendFiles sends messages with more descriptors than one packet
// carries: every one arrives, in order, and a message sent after them is
// read as its own.
func TestSendFiles(t *testing.T) {
	for _, n := range []int{0, 1, 2, maxFDs, maxFDs + 1, maxFDs + 60} {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		a := fileConn(t, fds[0])
		b := fileConn(t, fds[1])
		// Memfds of distinct sizes tell which is which.
		var send []int
		for i := range n {
			fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			if err := unix.Ftruncate(fd, int64(i+1)); err != nil {
				t.Fatal(err)
			}
			send = append(send, fd)
		}
		r := reply{ID: 7, Files: n}
		errc := make(chan error, 1)
		go func() {
			err := sendFiles(a, r, send)
			if err == nil {
				err = sendFiles(a, reply{ID: 8}, nil)
			}
			errc <- err
		}()
		var got reply
		files, err := recvMsg(b, &got)
		if err != nil {
			t.Fatalf("%d descriptors: %v", n, err)
		}
		if got.ID != 7 || len(files) != n {
			t.Fatalf("%d descriptors: got reply %d with %d", n, got.ID, len(files))
		}
		for i, f := range files {
			fi, err := f.Stat()
			if err != nil || fi.Size() != int64(i+1) {
				t.Fatalf("%d descriptors: number %d is not the one sent (%v, %v)", n, i, fi, err)
			}
		}
		closeFiles(files)
		var next reply
		if _, err := recvMsg(b, &next); err != nil || next.ID != 8 {
			t.Errorf("%d descriptors: the next message read as %+v, %v", n, next, err)
		}
		if err := <-errc; err != nil {
			t.Fatalf("%d descriptors: send: %v", n, err)
		}
		for _, fd := range send {
			unix.Close(fd)
		}
		a.Close()
		b.Close()
	}
}

func fileConn(t *testing.T, fd int) *net.UnixConn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "pair")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}
