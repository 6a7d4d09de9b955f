package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// copiesSrc is the harness's own kernel-free client program.
func copiesSrc(c *harness.Cluster) string {
	return filepath.Join(c.Build.Root, "e2e/harness/testdata/copies.c")
}

// sessions lists the host's sessions through gpuctl.
func sessions(t *testing.T, h *harness.Host) []map[string]any {
	t.Helper()
	out, err := h.Gpuctl(t.Context(), "sessions", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var list []map[string]any
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("gpuctl sessions --json: %v: %s", err, out)
	}
	return list
}

// waitNoSessions waits until the host has no sessions left and no process
// but gpud runs in its namespace: every worker was cleaned up.
func waitNoSessions(t *testing.T, h *harness.Host, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		list := sessions(t, h)
		procs := nsProcesses(t, h.NS)
		if len(list) == 0 && procs == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d sessions %v and %d processes in %s (want 0 sessions, only gpud)", within, len(list), list, procs, h.NS)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nsProcesses(t *testing.T, ns string) int {
	t.Helper()
	out, err := harnessIP("netns", "pids", ns)
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", ns, err)
	}
	return len(strings.Fields(out))
}

func TestRemotingCopiesAndErrors(t *testing.T) {
	c := harness.New(t)
	// The default grace (30 s): the clients exit normally, and their
	// goodbyes, not the grace period, end their sessions.
	host := c.NewHost("gpu-a", harness.HostOptions{})
	client := c.NewNode("client")
	prog := c.CompileC(copiesSrc(c))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"copies, memsets, streams, events, pinned memory", []string{"basic"}, "copies: ok (gpuctl emulated device, sm_90"},
		{"1 PiB allocation is out of memory", []string{"oom"}, "copies: oom ok"},
		{"made-up handle is invalid", []string{"badhandle"}, "copies: badhandle ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := client.RunClient(host, 30*time.Second, nil, prog, tc.args...)
			if r.Code != 0 || !strings.Contains(r.Stdout, tc.want) {
				t.Fatalf("exit %d after %v\nstdout: %s\nstderr: %s", r.Code, r.Duration, r.Stdout, r.Stderr)
			}
		})
	}
	// Every client has exited and said goodbye: nothing is left.
	waitNoSessions(t, host, 3*time.Second)
}

func TestRemotingWrongToken(t *testing.T) {
	c := harness.New(t)
	host := c.NewHost("gpu-a", harness.HostOptions{})
	client := c.NewNode("client")
	prog := c.CompileC(copiesSrc(c))
	wrong := filepath.Join(t.TempDir(), "wrong-token")
	if err := os.WriteFile(wrong, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := client.RunClientTo(host.Listen(), wrong, 20*time.Second, nil, prog, "basic")
	if r.Code == 0 || r.Code == -1 {
		t.Fatalf("a client with a wrong token got exit %d after %v (want an error, not success or a hang)\nstdout: %s\nstderr: %s",
			r.Code, r.Duration, r.Stdout, r.Stderr)
	}
	if n := len(sessions(t, host)); n != 0 {
		t.Fatalf("a refused client created %d sessions", n)
	}
	if !strings.Contains(host.Log(), "wrong token") {
		t.Errorf("gpud did not log the refusal")
	}
}

func TestRemotingGpudKilledMidRun(t *testing.T) {
	c := harness.New(t)
	host := c.NewHost("gpu-a", harness.HostOptions{})
	client := c.NewNode("client")
	prog := c.CompileC(copiesSrc(c))

	done := make(chan harness.Result, 1)
	// The client library retries a lost gpud for GPUCTL_RECONNECT_TIMEOUT
	// (a migration or a cut link looks the same at first); then it must
	// fail the program's calls.
	go func() {
		done <- client.RunClient(host, 45*time.Second, []string{"GPUCTL_RECONNECT_TIMEOUT=3"}, prog, "loop", "60")
	}()
	// Let it run, then kill gpud as a crash would.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if list := sessions(t, host); len(list) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the client's session never appeared")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	host.Kill()
	r := <-done
	if r.Code == 0 || r.Code == -1 {
		t.Fatalf("client exit %d after %v when gpud died (want an error, not success or a hang)\nstdout: %s\nstderr: %s",
			r.Code, r.Duration, r.Stdout, r.Stderr)
	}
	if n := nsProcesses(t, host.NS); n != 0 {
		t.Fatalf("%d processes (workers) outlived the killed gpud", n)
	}
}

// TestRemotingKernelPrograms runs the C programs of e2e/cprogs through
// gpuctl run: each checks its results against a CPU reference and prints
// an "ok" line.
func TestRemotingKernelPrograms(t *testing.T) {
	c := harness.New(t)
	// The default grace (30 s): each program's exit ends its session.
	host := c.NewHost("gpu-a", harness.HostOptions{})
	client := c.NewNode("client")
	dir := filepath.Join(c.Build.Root, "e2e/cprogs")
	env := []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"vecadd", []string{"100000"}},
		{"reduction", []string{"262144"}},
		{"matmul", []string{"64", "48", "80"}},
		{"warpreduce", []string{"262144"}},
		{"pipeline", []string{"65536", "4"}},
		{"errors", []string{"all"}},
		{"graphs", []string{"4096"}},
		{"mempool", []string{"65536"}},
		{"vmm", nil},
		{"memops", nil},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			// -ffp-contract=off: the programs compare floats bit for bit.
			bin := c.CompileC(filepath.Join(dir, tc.prog+".c"), "-ffp-contract=off")
			r := client.RunClient(host, 50*time.Second, env, bin, tc.args...)
			if r.Code != 0 || !strings.Contains(r.Stdout, "ok") {
				t.Fatalf("%s %v: exit %d after %v\nstdout: %s\nstderr: %s", tc.prog, tc.args, r.Code, r.Duration, r.Stdout, r.Stderr)
			}
			t.Logf("%s: %s (%v)", tc.prog, strings.TrimSpace(r.Stdout), r.Duration.Round(time.Millisecond))
		})
	}
	waitNoSessions(t, host, 3*time.Second)
}

// TestRemotingHostileConnections throws garbage, an HTTP request, an
// oversized handshake and a silent half-open connection at gpud while a
// client runs: each is refused, and the client never notices.
func TestRemotingHostileConnections(t *testing.T) {
	c := harness.New(t)
	host := c.NewHost("gpu-a", harness.HostOptions{Args: []string{"--handshake-timeout", "1s"}})
	client := c.NewNode("client")
	attacker := c.NewNode("attacker")
	prog := c.CompileC(copiesSrc(c))

	done := make(chan harness.Result, 1)
	go func() { done <- client.RunClient(host, 40*time.Second, nil, prog, "loop", "4") }()

	tcp := "/dev/tcp/" + host.IP + "/" + harness.ListenPort
	for _, tc := range []struct{ name, script string }{
		{"garbage", `head -c 4096 /dev/urandom >` + tcp},
		{"http", `exec 3<>` + tcp + `; printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >&3; cat <&3 >/dev/null`},
		// A hello whose token length field says 65535 bytes.
		{"oversized hello", `exec 3<>` + tcp + `; printf 'GPUH\x01\x00\x00\x00\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >&3; cat <&3 >/dev/null`},
		// Connects and says nothing; gpud must drop it after the deadline.
		{"half open", `exec 3<>` + tcp + `; cat <&3 >/dev/null`},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		start := time.Now()
		_ = attacker.Command(ctx, "bash", "-c", tc.script).Run() // its exit status does not matter
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("%s: gpud kept the connection open for %v", tc.name, time.Since(start))
		}
	}
	r := <-done
	if r.Code != 0 || !strings.Contains(r.Stdout, "copies: loop ok") {
		t.Fatalf("the honest client was disturbed: exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	for _, want := range []string{"refused connection"} {
		if !strings.Contains(host.Log(), want) {
			t.Errorf("gpud's log lacks %q", want)
		}
	}
}
