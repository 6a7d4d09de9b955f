package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
)

// maxResp bounds one RPC response. A SEQPACKET read truncates a message
// that does not fit, so this is generous: responses are a few hundred
// bytes.
const maxResp = 64 << 10

// call runs one request against a fresh `criu swrk` and returns CRIU's
// final response. CRIU is reaped on every path.
func call(ctx context.Context, bin string, req *rpc.CriuReq) (*rpc.CriuResp, error) {
	return callStarted(ctx, bin, req, nil)
}

// callStarted is call that tells started, when set, the PID of the CRIU
// process, which leads its own process group, once it runs.
func callStarted(ctx context.Context, bin string, req *rpc.CriuReq, started func(pid int)) (*rpc.CriuResp, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "criu-swrk")
	theirs := os.NewFile(uintptr(fds[1]), "criu-swrk-peer")

	// CRIU gets its end as fd 3; ExtraFiles clears close-on-exec there.
	cmd := exec.Command(bin, "swrk", "3")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
	cmd.Env = criubin.Env()
	// Its own process group, so that a cancelled call kills what CRIU
	// forked too: a restore's helper inherits CRIU's end of the socket,
	// and killing CRIU alone left our read blocked on it for good.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	// Only CRIU holds its end now: if it dies, our reads see EOF.
	theirs.Close()
	if started != nil {
		started(cmd.Process.Pid)
	}

	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	defer func() {
		close(done)
		ours.Close()
		_ = cmd.Wait() // the response, not the exit status, is CRIU's verdict
	}()

	resp, err := exchange(ours, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return resp, err
	}
	return resp, nil
}

// exchange sends req and reads responses until a final one. CRIU sends
// NOTIFY messages only when notify scripts are asked for, which we never
// do; one arriving anyway is acknowledged so CRIU can go on.
func exchange(sk *os.File, req *rpc.CriuReq) (*rpc.CriuResp, error) {
	buf := make([]byte, maxResp)
	want := req.GetType()
	for {
		b, err := proto.Marshal(req)
		if err != nil {
			return nil, fmt.Errorf("encode criu request: %w", err)
		}
		if _, err := sk.Write(b); err != nil {
			return nil, fmt.Errorf("send criu request: %w", err)
		}
		n, err := sk.Read(buf)
		if err != nil {
			return nil, fmt.Errorf("criu exited without answering: %w", err)
		}
		if n == 0 {
			return nil, errors.New("criu exited without answering")
		}
		resp := &rpc.CriuResp{}
		if err := proto.Unmarshal(buf[:n], resp); err != nil {
			return nil, fmt.Errorf("decode criu response: %w", err)
		}
		if !resp.GetSuccess() {
			msg := strings.TrimSpace(resp.GetCrErrmsg())
			if msg == "" {
				msg = "failed"
			}
			if e := resp.GetCrErrno(); e != 0 {
				return resp, fmt.Errorf("%s (%w)", msg, syscall.Errno(e))
			}
			return resp, errors.New(msg)
		}
		if resp.GetType() != rpc.CriuReqType_NOTIFY {
			if resp.GetType() != want {
				return resp, fmt.Errorf("criu answered %v to %v", resp.GetType(), want)
			}
			return resp, nil
		}
		req = &rpc.CriuReq{Type: rpc.CriuReqType_NOTIFY.Enum(), NotifySuccess: proto.Bool(true)}
	}
}
