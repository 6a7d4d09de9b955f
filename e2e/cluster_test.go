package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// sharedToken writes a token file for hosts that migrate to each other.
func sharedToken(t *testing.T) string {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("e2e-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	return tok
}

// startRegistry runs `gpud registry` (the embedded etcd) in a namespace of
// its own on c's network until the test ends, and returns its URL.
func startRegistry(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	regNode := c.NewNode("reg")
	reg := regNode.Command(context.Background(), c.Build.Gpud, "registry", "--data-dir", t.TempDir(), "--listen", regNode.IP+":2379")
	var regOut syncBuffer
	reg.Stdout, reg.Stderr = &regOut, &regOut
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.Process.Signal(syscall.SIGTERM)
		_ = reg.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(regOut.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("gpud registry did not come up: %s", regOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "http://" + regNode.IP + ":2379"
}

// syncBuffer is a strings.Builder that a process writes while the test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestCluster runs three hosts on the embedded registry (its own
// namespace), each keeping copies of its new images on the two others
// (--replicas 2): the hosts register and show up; a running session is
// migrated with --to auto, which picks one of the other two and says why;
// checkpointed there through the registry, its image replicated to both
// others; the host holding it SIGKILLed and shown down within 20 s; the
// session resumed from a replica (on the holder with the most room, as
// restore --on auto picks), which takes it over, while a restore of the
// same image on the other holder is fenced; and the client, which knows
// only the first host and the dead one, is sent on to the session's new
// host by the first and finishes with the unmigrated result.
func TestCluster(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	tok := sharedToken(t)
	regURL := startRegistry(t, c)

	opts := harness.HostOptions{TokenFile: tok, Args: []string{"--registry", regURL, "--listen", "0.0.0.0:" + harness.ListenPort, "--replicas", "2"},
		GpuctlEnv: []string{"GPUCTL_REGISTRY=" + regURL}}
	w := &world{t: t, c: c}
	// a has less device memory than b and c, so that a restore there
	// ranks below the other holder and its client must be sent on.
	optsA := opts
	optsA.Args = append(append([]string{}, opts.Args...), "--emulated-mem", strconv.Itoa(8<<30))
	w.a = c.NewHost("a", optsA)
	hosts := map[string]*harness.Host{"a": w.a, "b": c.NewHost("b", opts), "c": c.NewHost("c", opts)}
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	w.requireRoutes(w.a)

	type hostRow struct {
		Name  string `json:"name"`
		State string `json:"state"`
		API   string `json:"api"`
	}
	states := func() map[string]string {
		var hs []hostRow
		w.ctlJSON(w.a, &hs, "hosts")
		out := map[string]string{}
		for _, h := range hs {
			out[h.Name] = h.State
		}
		return out
	}
	if got := states(); got["a"] != "up" || got["b"] != "up" || got["c"] != "up" {
		t.Fatalf("hosts: %v, want a, b and c up", got)
	}
	where := func(id string) (host, state string) {
		var ss []struct {
			ID    string `json:"id"`
			Host  string `json:"host"`
			State string `json:"state"`
		}
		w.ctlJSON(w.a, &ss, "sessions")
		for _, s := range ss {
			if s.ID == id {
				return s.Host, s.State
			}
		}
		return "", ""
	}

	// Steps enough for the client to be still running after the resume,
	// where the registry is checked: with wlSteps it had about one step
	// left once it was preempted, and could end before the check.
	steps := 3 * wlSteps
	want := w.result(<-w.start(w.a, w.stateful, wlMiB, steps, 0))
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, steps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)

	// Placement: b and c are alike and hold none of the session's
	// images; either will do, and the choice is explained.
	out, err := w.ctl(w.a, "migrate", s.ID, "--to", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "placing "+s.ID+" on ") || !strings.Contains(out, "free") {
		t.Errorf("migrate --to auto did not say where and why: %q", out)
	}
	xName, st := where(s.ID)
	if (xName != "b" && xName != "c") || st == "stopped" {
		t.Fatalf("after migrate --to auto the session is on %q (%s):\n%s", xName, st, out)
	}
	t.Logf("migrate --to auto: %s", strings.TrimSpace(out))
	x := hosts[xName]
	yName := map[string]string{"b": "c", "c": "b"}[xName]

	// Preempt it on x through the registry; x replicates the image to
	// both others.
	time.Sleep(500 * time.Millisecond)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID)
	copies := func(image string) map[string]string {
		var ims []struct {
			ID     string `json:"id"`
			Copies []struct {
				Host  string `json:"host"`
				State string `json:"state"`
			} `json:"copies"`
		}
		w.ctlJSON(w.a, &ims, "images", "ls")
		out := map[string]string{}
		for _, im := range ims {
			if im.ID == image {
				for _, c := range im.Copies {
					out[c.Host] = c.State
				}
			}
		}
		return out
	}
	t0 := time.Now()
	for cs := copies(ck.Image); len(cs) < 3; cs = copies(ck.Image) {
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("image %s on %v 20 s after its checkpoint, want on a, b and c", ck.Image, cs)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("image %s replicated to all three hosts in %v", ck.Image, time.Since(t0).Round(100*time.Millisecond))

	x.Kill()
	t0 = time.Now()
	for states()[xName] != "down" {
		if time.Since(t0) > 20*time.Second {
			t.Fatalf("%s not down 20 s after SIGKILL", xName)
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("%s down %v after SIGKILL", xName, time.Since(t0).Round(100*time.Millisecond))
	if cs := copies(ck.Image); cs[xName] != "down" || cs["a"] != "up" || cs[yName] != "up" {
		t.Errorf("copies of %s after %s died: %v", ck.Image, xName, cs)
	}

	// A host that holds a replica takes the session over from its image;
	// the other is then fenced.
	var rs []struct {
		Session string `json:"session"`
		Image   string `json:"image"`
	}
	w.ctlJSON(w.a, &rs, "resume", s.ID)
	if len(rs) != 1 || rs[0].Session != s.ID || rs[0].Image != ck.Image {
		t.Fatalf("resume %s: %+v, want it from %s", s.ID, rs, ck.Image)
	}
	if h, st := where(s.ID); h != yName || st == "stopped" {
		t.Fatalf("after resume the session is on %q (%s), want %s, the holder with the most free memory", h, st, yName)
	}
	if _, err := w.ctl(w.a, "restore", ck.Image); err == nil || !strings.Contains(err.Error(), "fenced") || !strings.Contains(err.Error(), yName) {
		t.Errorf("restore of the session's image on a while it is live on %s: %v, want fenced", yName, err)
	}
	if h, st := where(s.ID); h != yName || st == "stopped" {
		t.Errorf("the registry has the session on %q (%s), want %s", h, st, yName)
	}

	// The client knows a and x only; x is gone, and a sends it on to y.
	if got := w.result(<-run); got != want {
		t.Errorf("run migrated, preempted and resumed elsewhere: %q, unmigrated: %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(w.a.StateDir, "gpud.log")); err != nil || !strings.Contains(string(b), "sending a client to its session's host, from the registry") {
		t.Errorf("a did not send the client on from the registry (err %v)", err)
	}
}
