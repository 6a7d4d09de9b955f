package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// alice's limits on hosts A and B in the tenant tests.
const (
	aliceMaxSessions = 2
	aliceMaxMiB      = 48
)

// tenantWorld is hosts A and B with the same host token and the same
// tenants (alice, limited; bob, not), host C with the host token and no
// tenants, and a client node.
type tenantWorld struct {
	t        *testing.T
	c        *harness.Cluster
	a, b, c3 *harness.Host
	client   *harness.Node
	tokens   map[string]string // "admin", "alice", "bob": token files
	memhold  string            // e2e/cprogs/memhold.c
	stateful string
	env      []string
}

func newTenantWorld(t *testing.T) *tenantWorld {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	dir := t.TempDir()
	w := &tenantWorld{t: t, c: c, tokens: map[string]string{}}
	for _, who := range []string{"admin", "alice", "bob"} {
		p := filepath.Join(dir, who+".token")
		if err := os.WriteFile(p, []byte(fmt.Sprintf("e2e-%s-%d\n", who, time.Now().UnixNano())), 0o600); err != nil {
			t.Fatal(err)
		}
		w.tokens[who] = p
	}
	file := filepath.Join(dir, "tenants.json")
	tenants := fmt.Sprintf(`[{"name":"alice","token_file":%q,"max_sessions":%d,"max_mem_bytes":%d},{"name":"bob","token_file":%q}]`,
		w.tokens["alice"], aliceMaxSessions, aliceMaxMiB<<20, w.tokens["bob"])
	if err := os.WriteFile(file, []byte(tenants), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--tenants", file, "--grace", "3s"}
	w.a = c.NewHost("a", harness.HostOptions{TokenFile: w.tokens["admin"], Args: args})
	w.b = c.NewHost("b", harness.HostOptions{TokenFile: w.tokens["admin"], Args: args})
	w.c3 = c.NewHost("c", harness.HostOptions{TokenFile: w.tokens["admin"], Args: []string{"--grace", "3s"}})
	w.client = c.NewNode("client")
	w.memhold = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/memhold.c"))
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	return w
}

// as runs gpuctl against h with who's token; it returns stdout, stderr
// and the exit status.
func (w *tenantWorld) as(who string, h *harness.Host, args ...string) (string, string, int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := h.Command(ctx, w.c.Build.Gpuctl, append([]string{"--host", h.API(), "--token-file", w.tokens[who]}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("gpuctl %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), strings.TrimSpace(errOut.String()), code
}

// asJSON runs a gpuctl command that must succeed and decodes its --json.
func (w *tenantWorld) asJSON(who string, h *harness.Host, v any, args ...string) {
	w.t.Helper()
	out, errOut, code := w.as(who, h, append(args, "--json")...)
	if code != 0 {
		w.t.Fatalf("gpuctl %s as %s: exit %d: %s", strings.Join(args, " "), who, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		w.t.Fatalf("gpuctl %s --json: %v: %q", strings.Join(args, " "), err, out)
	}
}

type tenantSession struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Tenant string `json:"tenant"`
}

func (w *tenantWorld) sessions(who string, h *harness.Host) []tenantSession {
	w.t.Helper()
	var ss []tenantSession
	w.asJSON(who, h, &ss, "sessions")
	return ss
}

// owners maps the sessions who sees on h to their tenants ("-" for the
// administrator's).
func (w *tenantWorld) owners(who string, h *harness.Host) map[string]string {
	out := map[string]string{}
	for _, s := range w.sessions(who, h) {
		out[s.ID] = cmpOr(s.Tenant, "-")
	}
	return out
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// waitIdle waits until h has no session left (the clients that exited
// have ended theirs).
func (w *tenantWorld) waitIdle(h *harness.Host) {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(w.sessions("admin", h)) > 0 {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s still has sessions: %v", h.Name, w.sessions("admin", h))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// holder is a running memhold client, driven line by line.
type holder struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	stderr *strings.Builder
}

// hold starts memhold on h as who.
func (w *tenantWorld) hold(who string, h *harness.Host) *holder {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	w.t.Cleanup(cancel)
	cmd := w.client.Command(ctx, w.c.Build.Gpuctl, "run", "--server", h.Listen(), "--token-file", w.tokens[who], "--", w.memhold)
	cmd.Env = append(cmd.Environ(), w.env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	p := &holder{t: w.t, cmd: cmd, in: in, lines: make(chan string, 16), stderr: &strings.Builder{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	w.t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	return p
}

// do sends one command and returns memhold's answer.
func (p *holder) do(cmd string) string {
	p.t.Helper()
	if _, err := io.WriteString(p.in, cmd+"\n"); err != nil {
		p.t.Fatalf("memhold %q: %v; stderr: %s", cmd, err, p.stderr)
	}
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("memhold exited during %q; stderr: %s", cmd, p.stderr)
		}
		return l
	case <-time.After(60 * time.Second):
		p.t.Fatalf("memhold did not answer %q; stderr: %s", cmd, p.stderr)
	}
	return ""
}

func (p *holder) expect(cmd, want string) {
	p.t.Helper()
	if got := p.do(cmd); got != want {
		p.t.Fatalf("memhold %q answered %q, want %q; stderr: %s", cmd, got, want, p.stderr)
	}
}

// quit ends memhold, which must exit 0.
func (p *holder) quit() {
	p.t.Helper()
	p.expect("quit", "bye")
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		p.t.Fatalf("memhold: %v; stderr: %s", err, p.stderr)
	}
}

// sameRefusal checks that what who got for id says exactly what it gets
// for a made-up id of the same kind: nothing tells the two apart.
func (w *tenantWorld) sameRefusal(who string, h *harness.Host, id, madeUp string, args ...string) {
	w.t.Helper()
	sub := func(a []string, with string) []string {
		out := make([]string, len(a))
		for i, s := range a {
			out[i] = strings.ReplaceAll(s, "ID", with)
		}
		return out
	}
	_, got, code := w.as(who, h, sub(args, id)...)
	_, want, wantCode := w.as(who, h, sub(args, madeUp)...)
	if code != 3 || wantCode != 3 || strings.ReplaceAll(got, id, madeUp) != want {
		w.t.Errorf("gpuctl %s as %s: exit %d %q; for a made-up id: exit %d %q (want both exit 3, the same words)",
			strings.Join(sub(args, id), " "), who, code, got, wantCode, want)
	}
}

// TestTenants: two tenants on the same hosts each see and act on their
// own sessions and images only; alice's limits hold at the handshake and
// in the worker without touching bob; the administrator sees everything;
// migration keeps a session's and its image's owner, and is refused
// where the tenant is unknown.
func TestTenants(t *testing.T) {
	w := newTenantWorld(t)
	a := w.a

	// Device memory: alice's two sessions share 48 MiB.
	a1 := w.hold("alice", a)
	a1.expect("alloc x 32", "alloc x ok")
	a2 := w.hold("alice", a)
	a2.expect("alloc y 32", "alloc y CUDA_ERROR_OUT_OF_MEMORY")
	if f := strings.Fields(a2.do("info")); len(f) != 3 || f[1] != fmt.Sprint(16<<20) || f[2] != fmt.Sprint(aliceMaxMiB<<20) {
		t.Errorf("cuMemGetInfo in alice's second session: %v, want 16 MiB free of 48", f)
	}
	a2.expect("alloc z 16", "alloc z ok")
	a2.expect("check z", "check z ok") // the refusal harmed nothing
	// bob is not limited, and alice at her limit does not touch him.
	b1 := w.hold("bob", a)
	b1.expect("alloc big 256", "alloc big ok")
	b1.expect("check big", "check big ok")

	// A third session of alice's is refused at the handshake, with one
	// line that says why.
	r := w.client.RunClientTo(a.Listen(), w.tokens["alice"], time.Minute, w.env, w.memhold)
	const quotaLine = `tenant "alice" already has 2 live session(s) on this host, its max_sessions; end one before starting another`
	if r.Code == 0 || strings.Count(r.Stderr, quotaLine) != 1 {
		t.Errorf("alice's third session: exit %d, stderr %q; want a failure and the line %q once", r.Code, r.Stderr, quotaLine)
	}

	// Memory freed in one session is there for the other at once.
	a1.expect("free x", "free x ok")
	// Pools and VMM count against the limit as cuMemAlloc does, summed
	// over alice's sessions: no way around it.
	a2.expect("pool p 16", "pool p ok")
	a2.expect("check p", "check p ok")
	a2.expect("vmm v 16", "vmm v ok")
	a1.expect("pool q 8", "pool q CUDA_ERROR_OUT_OF_MEMORY")
	a1.expect("vmm w 8", "vmm w CUDA_ERROR_OUT_OF_MEMORY")
	a1.expect("alloc x 8", "alloc x CUDA_ERROR_OUT_OF_MEMORY")
	a2.expect("free p", "free p ok")
	a2.expect("free v", "free v ok")
	a2.expect("alloc y 32", "alloc y ok")
	a2.expect("check y", "check y ok")

	// Listings: each tenant its own, the administrator all, with owners.
	all := w.owners("admin", a)
	if len(all) != 3 {
		t.Fatalf("the administrator sees %v, want alice's two sessions and bob's", all)
	}
	var bobID string
	for id, owner := range all {
		if owner == "bob" {
			bobID = id
		}
	}
	for who, want := range map[string]int{"alice": 2, "bob": 1} {
		got := w.owners(who, a)
		for id, owner := range got {
			if owner != who || all[id] != who {
				t.Errorf("%s sees session %s of %s", who, id, owner)
			}
		}
		if len(got) != want {
			t.Errorf("%s sees %d sessions, want %d: %v", who, len(got), want, got)
		}
	}
	// alice acting on bob's session is told what a made-up id gets.
	w.sameRefusal("alice", a, bobID, "s-000000000000", "checkpoint", "ID")
	w.sameRefusal("alice", a, bobID, "s-000000000000", "migrate", "ID", "--to", w.b.API())
	var host struct {
		Sessions     int     `json:"sessions"`
		MemFreeBytes *uint64 `json:"mem_free_bytes"`
		Tenants      []struct {
			Name     string `json:"name"`
			Sessions int    `json:"sessions"`
			MemBytes uint64 `json:"mem_bytes"`
		} `json:"tenants"`
	}
	w.asJSON("alice", a, &host, "host")
	if host.Sessions != 2 || host.MemFreeBytes != nil || len(host.Tenants) != 1 || host.Tenants[0].Name != "alice" ||
		host.Tenants[0].MemBytes != aliceMaxMiB<<20 {
		t.Errorf("gpuctl host as alice: %+v; want her 2 sessions, her 48 MiB, no one else's", host)
	}
	a1.quit()
	a2.quit()
	b1.quit()
	w.waitIdle(a)

	// Images: alice's checkpoint is hers.
	run := make(chan harness.Result, 1)
	go func() {
		run <- w.client.RunClientTo(a.Listen(), w.tokens["alice"], 4*time.Minute, w.env, w.stateful, "1", "80", "100")
	}()
	var sid string
	for deadline := time.Now().Add(30 * time.Second); sid == ""; {
		for id := range w.owners("alice", a) {
			sid = id
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's stateful session did not show up")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var ck checkpointResult
	w.asJSON("alice", a, &ck, "checkpoint", sid, "--leave-running")
	var imgs []struct {
		ID     string `json:"id"`
		Tenant string `json:"tenant"`
	}
	w.asJSON("alice", a, &imgs, "images", "ls")
	if len(imgs) != 1 || imgs[0].ID != ck.Image || imgs[0].Tenant != "alice" {
		t.Errorf("alice's images: %+v, want her checkpoint %s", imgs, ck.Image)
	}
	w.asJSON("bob", a, &imgs, "images", "ls")
	if len(imgs) != 0 {
		t.Errorf("bob sees images %+v", imgs)
	}
	w.asJSON("admin", a, &imgs, "images", "ls")
	if len(imgs) != 1 || imgs[0].Tenant != "alice" {
		t.Errorf("the administrator's images: %+v", imgs)
	}
	file := filepath.Join(t.TempDir(), "x.img")
	for _, args := range [][]string{
		{"images", "inspect", "ID"}, {"images", "export", "ID", file}, {"images", "rm", "ID"},
		{"images", "verify", "ID"}, {"restore", "ID"},
	} {
		w.sameRefusal("bob", a, ck.Image, "img-000000000000", args...)
	}
	if _, errOut, code := w.as("bob", a, "images", "gc"); code != 5 || !strings.Contains(errOut, "administrator") {
		t.Errorf("gc as bob: exit %d %q, want 5 and a line saying it is the administrator's", code, errOut)
	}

	// Migration: C does not know alice, so the session stays on A.
	_, errOut, code := w.as("alice", a, "migrate", sid, "--to", w.c3.API())
	if code == 0 || !strings.Contains(errOut, `precheck`) || !strings.Contains(errOut, `does not know tenant "alice"`) {
		t.Errorf("migration to a host without alice: exit %d %q", code, errOut)
	}
	// B knows her: the session and its image stay hers there.
	var mig migrateResult
	w.asJSON("alice", a, &mig, "migrate", sid, "--to", w.b.API())
	if got := w.owners("admin", w.b); got[sid] != "alice" {
		t.Errorf("B's sessions after the migration: %v, want %s as alice's", got, sid)
	}
	if got := w.owners("bob", w.b); len(got) != 0 {
		t.Errorf("bob sees %v on B", got)
	}
	w.asJSON("alice", w.b, &imgs, "images", "ls")
	if len(imgs) != 1 || imgs[0].ID != mig.Image || imgs[0].Tenant != "alice" {
		t.Errorf("alice's images on B: %+v, want %s as hers", imgs, mig.Image)
	}
	res := <-run
	if res.Code != 0 || !strings.Contains(res.Stdout, "RESULT ") || strings.Contains(res.Stdout, " BAD") {
		t.Fatalf("alice's client across the checkpoint and migration: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}

	// The audit log names who did what to what, and how it went.
	for _, want := range []string{
		`log=audit tenant=bob action=image.restore subject="image ` + ck.Image + `" result=not_found`,
		`log=audit tenant=alice action=session.checkpoint subject="session ` + bobID + `" result=not_found`,
		`log=audit tenant=bob action=images.gc subject="" result=permission_denied`,
		`log=audit tenant=alice action=session.create subject="" result=resource_exhausted`,
		`log=audit tenant=alice action=session.migrate subject="session ` + sid + `" result=ok`,
	} {
		if !strings.Contains(a.Log(), want) {
			t.Errorf("A's log lacks %q", want)
		}
	}
}

// A token file that others can read stops gpud at its start, with one
// line that names the file and says how to fix it.
func TestTenantTokenFilePermissions(t *testing.T) {
	b := harness.FindBuild(t)
	dir := t.TempDir()
	host := filepath.Join(dir, "host.token")
	open := filepath.Join(dir, "open.token")
	os.WriteFile(host, []byte("host-token\n"), 0o600)
	os.WriteFile(open, []byte("open-token\n"), 0o600)
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tenants.json")
	os.WriteFile(file, []byte(`[{"name":"alice","token_file":"`+open+`"}]`), 0o600)
	for _, tc := range []struct{ name, tokenFile, tenants, file string }{
		{"tenant token", host, file, open},
		{"host token", open, "", open},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--listen", "127.0.0.1:0", "--api", "127.0.0.1:0", "--state-dir", t.TempDir(), "--backend", "emulated", "--token-file", tc.tokenFile}
			if tc.tenants != "" {
				args = append(args, "--tenants", tc.tenants)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, b.Gpud, args...).CombinedOutput()
			want := "gpud: token file " + tc.file + " is open to group or others (mode 0644); run chmod 600 " + tc.file
			if err == nil || !strings.Contains(string(out), want) {
				t.Fatalf("gpud started or failed otherwise: %v\n%s\nwant the line %q", err, out, want)
			}
		})
	}
}
