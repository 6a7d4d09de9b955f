package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// startRegistry runs `gpud registry` on a node of its own until the test
// ends and returns its client URL.
func startRegistry(t *testing.T, c *harness.Cluster) string {
	t.Helper()
	n := c.NewNode("reg")
	reg := n.Command(context.Background(), c.Build.Gpud, "registry", "--data-dir", t.TempDir(), "--listen", n.IP+":2379")
	var out strings.Builder
	reg.Stdout, reg.Stderr = &out, &out
	if err := reg.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = reg.Process.Signal(syscall.SIGTERM)
		_ = reg.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("gpud registry did not come up: %s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "http://" + n.IP + ":2379"
}

// TestClusterImages: three hosts on the embedded registry without
// replication. A session on p is checkpointed (image 1, left running)
// and preempted (image 2); removing image 2 is refused while the session
// waits in it; image 1 is exported from p and imported on q, image 2 on
// r, each copy recorded; verify checks every copy of image 2. p stops
// (down), which verify and rm report; resume --on q picks q, which holds
// only image 1's chunks: r, the one up holder, sends it the rest, fewer
// bytes than the image, and the client, which knows p, q and r, finishes
// bit-exact on q.
func TestClusterImages(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	w := &world{t: t, c: harness.New(t)}
	c := w.c
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("e2e-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	regURL := startRegistry(t, c)
	opts := harness.HostOptions{TokenFile: tok, Args: []string{"--registry", regURL, "--listen", "0.0.0.0:" + harness.ListenPort},
		GpuctlEnv: []string{"GPUCTL_REGISTRY=" + regURL}}
	p, q, r := c.NewHost("p", opts), c.NewHost("q", opts), c.NewHost("r", opts)
	w.a = p
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	w.requireRoutes(p)

	const steps = 20
	want := w.result(<-w.start(p, w.stateful, wlMiB, steps, 0))
	old := w.sessions(p)
	run := w.startWith(p, []string{"GPUCTL_SERVERS=" + q.Listen() + "," + r.Listen()}, wlMiB, steps, wlSleep)
	s := w.session(p, old...)
	time.Sleep(500 * time.Millisecond)
	var ck1, ck2 checkpointResult
	w.ctlJSON(p, &ck1, "checkpoint", s.ID, "--leave-running")
	time.Sleep(300 * time.Millisecond)
	var pre []struct {
		Image string `json:"image"`
	}
	w.ctlJSON(p, &pre, "preempt", s.ID)
	if len(pre) != 1 {
		t.Fatalf("preempt: %+v", pre)
	}
	ck2.Image = pre[0].Image

	// Removing the image the session waits in is refused: by p itself
	// until its reconciler records the session as in that image (within
	// 2 s), then by gpuctl from the registry.
	for t0 := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		_, err := w.ctl(p, "images", "rm", ck2.Image)
		if err == nil || !strings.Contains(err.Error(), "session "+s.ID) || !strings.Contains(err.Error(), "host p") {
			t.Fatalf("rm of the image a preempted session waits in: %v, want refused naming the session and host p", err)
		}
		if strings.Contains(err.Error(), "waits in it") {
			break
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("the registry does not record preempted session %s in its image: %v", s.ID, err)
		}
	}

	// Copies on q (image 1) and r (image 2), through export and import.
	dir := t.TempDir()
	for _, x := range []struct {
		image string
		on    *harness.Host
	}{{ck1.Image, q}, {ck2.Image, r}} {
		file := filepath.Join(dir, x.image+".gpuimg")
		if _, err := w.ctl(p, "images", "export", x.image, file); err != nil {
			t.Fatal(err)
		}
		if out, err := w.ctl(p, "images", "import", file, "--on", x.on.Name); err != nil || !strings.Contains(out, x.on.Name+": imported "+x.image) {
			t.Fatalf("import of %s on %s: %q, %v", x.image, x.on.Name, out, err)
		}
	}
	var verify []struct {
		Host   string `json:"host"`
		Verify *struct {
			Chunks int `json:"chunks"`
		} `json:"verify"`
	}
	w.ctlJSON(p, &verify, "images", "verify", ck2.Image)
	if len(verify) != 2 || verify[0].Host != "p" || verify[1].Host != "r" || verify[0].Verify == nil || verify[1].Verify == nil || verify[1].Verify.Chunks == 0 {
		t.Fatalf("verify of every copy of %s: %+v, want p's and r's", ck2.Image, verify)
	}

	// p stops: its lease is revoked, and it reads down at once.
	if err := p.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	out, err := w.ctl(q, "images", "verify", ck2.Image)
	if err == nil || !strings.Contains(out, "r: verified") || !strings.Contains(out, "p: down") || !strings.Contains(err.Error(), "host p: down") {
		t.Errorf("verify with a holder down: %q, %v; want r verified and p reported down", out, err)
	}

	var res []struct {
		Session string `json:"session"`
		Image   string `json:"image"`
		TopUp   *struct {
			Host      string `json:"host"`
			From      string `json:"from"`
			SentBytes int64  `json:"sent_bytes"`
			Bytes     int64  `json:"bytes"`
		} `json:"topped_up"`
	}
	w.ctlJSON(q, &res, "resume", s.ID, "--on", "q")
	if len(res) != 1 || res[0].Image != ck2.Image || res[0].TopUp == nil {
		t.Fatalf("resume on q: %+v, want it from %s, topped up", res, ck2.Image)
	}
	tu := res[0].TopUp
	if tu.Host != "q" || tu.From != "r" || tu.SentBytes <= 0 || tu.SentBytes >= tu.Bytes {
		t.Errorf("top-up %+v: want q sent part of the image's bytes by r", *tu)
	}
	t.Logf("q topped up with %d of %d bytes from %s", tu.SentBytes, tu.Bytes, tu.From)
	if got := w.result(<-run); got != want {
		t.Errorf("run preempted on p and resumed on q: %q, unmigrated: %q", got, want)
	}

	// Image 1 goes from q; p, down, keeps its copy and is reported.
	out, err = w.ctl(q, "images", "rm", ck1.Image)
	if err == nil || !strings.Contains(out, "q: removed "+ck1.Image) || !strings.Contains(err.Error(), "host p: down") {
		t.Errorf("rm with a holder down: %q, %v", out, err)
	}
}
