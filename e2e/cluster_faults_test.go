package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
)

// The fault matrix's hosts renew a short lease, so that a cut longer
// than it costs seconds, not tens of them.
const (
	faultTTL = 3 * time.Second
	faultCut = faultTTL + time.Second
)

// The client runs long enough (30 steps of 100 ms) to be mid-run when the
// migration freezes it and, mostly, when a case checks where its session
// lives; a session whose client finished first has ended with it.
const (
	faultClientSteps = "30"
	faultClientSleep = "100"
)

// faultSteps are the steps of a migration the matrix faults, each at its
// failpoint migrate/STEP (package migrate: precheck, freeze, push,
// transfer, restore; moved comes after the target adopted the session).
var faultSteps = []string{"precheck", "freeze", "push", "transfer", "restore", "moved"}

// faultKinds are the faults: a killed (gpud and its workers, then
// restarted), a cut off for longer than its lease, b killed (then
// restarted), b's restore failing after the registry admitted it, or
// both: a cut off from the registry alone (a route to it blackholed)
// while b's restore fails, so that a cannot take the session back.
var faultKinds = []string{"partition", "kill", "target", "target-fails", "split"}

// faultExact says which cases keep the client's session: all but a source
// killed before its freeze stored an image (the live copy dies with it)
// and a target killed after its client ran there (only the target's copy
// held those steps).
func faultExact(step, fault string) bool {
	switch {
	case fault == "kill" && (step == "precheck" || step == "freeze"):
		return false
	case fault == "target" && step == "moved":
		return false
	}
	return true
}

// faultPair is the two hosts one fault's cases migrate between, a to b,
// and a's failpoint file.
type faultPair struct {
	*world
	fpA    string
	fpB    string
	regURL string
	want   string
	netns  map[uint64]bool // a's and b's namespaces
}

// TestMigrationFaultMatrix migrates a running session from a to b on the
// embedded registry and, at each step of the migration (a real gpud
// stopped there by its failpoint), SIGKILLs a (gpud and its workers, then
// restarts it from its state dir), cuts a's link for longer than its
// lease and lets it go on cut off, or SIGKILLs b (then restarts it).
// After each case, and after resuming the session from its image through
// the registry where no host runs it, it checks from the registry's owner
// record, from both hosts' own session lists and from the worker
// processes in their namespaces that they agree on one live copy (on
// none only where the copy was lost by design), and that the client
// finishes bit-exact, or, where its only copy was lost by design, fails
// with the interposer's clear error; it never hangs. The three faults run
// side by side, each on its own pair of hosts, sharing one registry.
func TestMigrationFaultMatrix(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	tok := sharedToken(t)
	regURL := startRegistry(t, c)
	host := func(name string) (*harness.Host, string) {
		fp := filepath.Join(t.TempDir(), "failpoints")
		return c.NewHost(name, harness.HostOptions{TokenFile: tok,
			Args:      []string{"--registry", regURL, "--registry-ttl", faultTTL.String(), "--listen", "0.0.0.0:" + harness.ListenPort, "--grace", "15s"},
			GpuctlEnv: []string{"GPUCTL_REGISTRY=" + regURL},
			Env:       []string{"GPUD_FAILPOINTS=" + fp}}), fp
	}
	client := c.NewNode("client")
	stateful := c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	env := []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	pairs := map[string]*faultPair{}
	var want string
	for _, fault := range faultKinds {
		p := &faultPair{world: &world{t: t, c: c, client: client, stateful: stateful, env: env}, regURL: regURL}
		p.a, p.fpA = host("a-" + fault)
		p.b, p.fpB = host("b-" + fault)
		p.netns = map[uint64]bool{netnsInode(t, p.a.NS): true, netnsInode(t, p.b.NS): true}
		if want == "" {
			p.requireRoutes(p.a)
			want = p.result(client.RunClient(p.a, time.Minute, env, stateful, fmt.Sprint(wlMiB), faultClientSteps, "0"))
		}
		p.want = want
		pairs[fault] = p
	}
	// The three run at once (most of a case is waiting), from goroutines
	// rather than as parallel subtests, which -parallel (GOMAXPROCS: 2 on
	// CI) would queue.
	var wg sync.WaitGroup
	for _, fault := range faultKinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(fault, func(t *testing.T) { p := pairs[fault]; p.runAll(t, fault) })
		}()
	}
	wg.Wait()
}

// runAll runs the cases of one fault in step order, on its pair of hosts.
func (p *faultPair) runAll(t *testing.T, fault string) {
	steps := faultSteps
	if fault == "target-fails" {
		// b's restore fails whichever step a is held at; only a
		// migration that reaches it differs.
		steps = []string{"restore"}
	}
	for _, step := range steps {
		ok := t.Run(step, func(t *testing.T) {
			p := *p
			w := *p.world
			w.t = t
			p.world = &w
			p.run(step, fault, faultExact(step, fault))
		})
		if !ok {
			break // the hosts may be in no state for the next case
		}
	}
}

// run is one case: a fault at migrate/STEP of a migration from a to b.
func (p *faultPair) run(step, fault string, exact bool) {
	t := p.t
	a, b := p.a, p.b
	point := "migrate/" + step
	old := p.own(a)
	env := append([]string{"GPUCTL_RECONNECT_TIMEOUT=15"}, p.env...)
	var r harness.Result
	ended := make(chan struct{}) // the client exited; its session ends with it
	go func() {
		r = p.client.RunClient(a, 90*time.Second, env, p.stateful, fmt.Sprint(wlMiB), faultClientSteps, faultClientSleep)
		close(ended)
	}()
	var id string
	waitFor(t, 20*time.Second, "the client's session on "+a.Name, func() bool {
		for _, s := range p.own(a) {
			if !slices.ContainsFunc(old, func(o clusterSession) bool { return o.ID == s.ID }) {
				id = s.ID
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)

	action := "hold"
	if fault == "kill" {
		action = "kill"
	}
	held := strings.Count(a.Log(), `msg="failpoint held" point=`+point)
	arm(t, p.fpA, point+" "+action)
	type migrated struct {
		out string
		err error
	}
	mig := make(chan migrated, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := a.Gpuctl(ctx, "migrate", id, "--to", b.API())
		mig <- migrated{out, err}
	}()
	waitFor(t, 20*time.Second, a.Name+" to reach "+point, func() bool {
		if fault == "kill" {
			return !a.Running()
		}
		return strings.Count(a.Log(), `msg="failpoint held" point=`+point) > held
	})
	switch fault {
	case "kill":
		killHost(t, a, p.c)
		arm(t, p.fpA, "")
		if err := a.Restart(); err != nil {
			t.Fatal(err)
		}
	case "partition":
		a.LinkDown()
		arm(t, p.fpA, "") // a goes on with the migration, cut off
		time.Sleep(faultCut)
		a.LinkUp()
	case "target-fails":
		arm(t, p.fpB, "restore/criu fail")
		arm(t, p.fpA, "")
	case "split":
		arm(t, p.fpB, "restore/criu fail")
		reg := strings.TrimSuffix(strings.TrimPrefix(p.regURL, "http://"), ":2379") + "/32"
		mustIP(t, "-n", a.NS, "route", "add", "blackhole", reg)
		arm(t, p.fpA, "")
		m := <-mig // the migration ends while a is cut off
		mig <- m
		mustIP(t, "-n", a.NS, "route", "del", "blackhole", reg)
	case "target":
		if step == "moved" {
			// b has taken the session over and told its client; let the
			// client run there for a few steps, which only b's copy holds.
			waitFor(t, 10*time.Second, "the client to run on "+b.Name, func() bool { return p.state(b, id) == "running" })
			time.Sleep(600 * time.Millisecond)
		}
		killHost(t, b, p.c)
		arm(t, p.fpA, "")
	}
	m := <-mig
	t.Logf("migrate: %s", strings.TrimSpace(m.out+" "+fmt.Sprint(m.err)))
	arm(t, p.fpB, "")
	if fault == "target" {
		if err := b.Restart(); err != nil {
			t.Fatal(err)
		}
	}

	// Recovery: where no host runs the session once a reconciliation
	// round has recorded what the fault left, resume it from its image
	// through the registry (on, or from, the host that owns it).
	if len(p.liveOn(id)) == 0 {
		time.Sleep(2500 * time.Millisecond)
		if len(p.liveOn(id)) == 0 {
			out, err := a.Gpuctl(context.Background(), "resume", id)
			t.Logf("no host runs %s; resume: %s", id, strings.TrimSpace(out+" "+fmt.Sprint(err)))
		}
	}
	owner := p.checkOneCopy(id, p.regURL, p.netns, exact, ended)

	<-ended
	switch {
	case r.Code == -1:
		t.Errorf("the client hung (killed after 90 s)\nstderr:\n%s", r.Stderr)
	case exact:
		if got := p.result(r); got != p.want {
			t.Errorf("client result %q, unmigrated %q", got, p.want)
		}
	case r.Code == 0 || !strings.Contains(r.Stderr, "the session is lost"):
		t.Errorf("client exited %d without saying its session is lost; its only copy was lost\nstderr:\n%s", r.Code, r.Stderr)
	default:
		t.Logf("client: %s", lastLine(r.Stderr))
	}
	t.Logf("owner: %s live %v image %s; client exit %d in %v", owner.Host, owner.Live, owner.Image, r.Code, r.Duration.Round(100*time.Millisecond))
}

func lastLine(s string) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return ls[len(ls)-1]
}

type clusterSession struct {
	ID    string `json:"id"`
	Host  string `json:"host"`
	State string `json:"state"`
}

// own lists h's sessions as h itself has them (not through the
// registry: a host of another case may be down, or not yet known down);
// nil while h is down.
func (w *world) own(h *harness.Host) []clusterSession {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := h.Gpuctl(ctx, "--registry=", "sessions", "--json")
	if err != nil {
		return nil
	}
	var ss []clusterSession
	if err := json.Unmarshal([]byte(out), &ss); err != nil {
		w.t.Fatalf("gpuctl sessions --json on %s: %v: %q", h.Name, err, out)
	}
	for i := range ss {
		ss[i].Host = h.Name
	}
	return ss
}

// state is session id's state on h, or "".
func (w *world) state(h *harness.Host, id string) string {
	for _, s := range w.own(h) {
		if s.ID == id {
			return s.State
		}
	}
	return ""
}

// liveOn lists the hosts of the pair that have id in a state other than
// stopped, as each says.
func (w *world) liveOn(id string) []string {
	var on []string
	for _, h := range []*harness.Host{w.a, w.b} {
		if st := w.state(h, id); st != "" && st != "stopped" {
			on = append(on, h.Name)
		}
	}
	return on
}

// checkOneCopy checks, retrying for a few seconds while processes exit and
// reconcilers run, that the registry's owner record, the hosts' session
// lists and the worker processes in their namespaces agree on at most one
// live copy of session id, and on exactly one where the session must
// survive (exact) and its client has not ended yet (a session ends with
// its client), and returns the owner record.
func (w *world) checkOneCopy(id, regURL string, netns map[uint64]bool, exact bool, ended <-chan struct{}) registry.Owner {
	t := w.t
	var bad string
	var o registry.Owner
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		o = w.ownerRecord(regURL, id)
		on := w.liveOn(id)
		pids := workerPIDs(w.c.Build.Gpud, netns)[id]
		workersOn := map[string]int{}
		for _, pid := range pids {
			var st syscall.Stat_t
			if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil {
				for _, h := range []*harness.Host{w.a, w.b} {
					if netnsInode(t, h.NS) == st.Ino {
						workersOn[h.Name]++
					}
				}
			}
		}
		state := fmt.Sprintf("live on %v, workers %v, registry %+v", on, workersOn, o)
		switch {
		case len(on) > 1 || len(pids) > 1:
			bad = "two live copies: " + state
		case len(on) == 1 && (workersOn[on[0]] != 1 || o.Host != on[0] || !o.Live):
			bad = "the live copy, its worker and the registry disagree: " + state
		case len(on) == 0 && (len(pids) != 0 || o.Live):
			bad = "no host runs the session, yet a worker or the registry says one does: " + state
		case len(on) == 0 && exact && !closed(ended):
			bad = "no live copy: " + state
		default:
			if len(on) == 0 && exact {
				t.Logf("the client finished before the check; its session ended with it: %s", state)
			}
			return o
		}
		if time.Now().After(deadline) {
			t.Error(bad)
			return o
		}
	}
}

// ownerRecord reads session id's owner record from the registry, by
// running this test binary's registryOwnerHelper in the client's
// namespace (the registry is reachable only on the cluster's network).
func (w *world) ownerRecord(regURL, id string) registry.Owner {
	t := w.t
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := w.client.Command(ctx, exe, "-test.run=^TestRegistryOwnerHelper$")
	cmd.Env = append(cmd.Environ(), "GPUCTL_E2E_OWNER="+regURL+" "+id)
	out, err := cmd.CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "OWNER "); ok {
			var o registry.Owner
			if err := json.Unmarshal([]byte(rest), &o); err != nil {
				t.Fatalf("owner record %q: %v", rest, err)
			}
			return o
		}
	}
	t.Fatalf("reading the owner record of %s: %v\n%s", id, err, out)
	return registry.Owner{}
}

// TestRegistryOwnerHelper is not a test: ownerRecord runs it in a
// namespace on the cluster's network to print a session's owner record
// ("OWNER {json}"; {} when there is none).
func TestRegistryOwnerHelper(t *testing.T) {
	arg := os.Getenv("GPUCTL_E2E_OWNER")
	if arg == "" {
		t.Skip("a helper that ownerRecord runs")
	}
	url, id, _ := strings.Cut(arg, " ")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := registry.Dial(ctx, []string{url}, registry.Options{DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o, err := r.Owner(ctx, id)
	if err != nil && !errs.IsNotFound(err) {
		t.Fatal(err)
	}
	b, _ := json.Marshal(o)
	fmt.Printf("OWNER %s\n", b)
}

// arm rewrites a host's GPUD_FAILPOINTS file ("" disarms every point).
func arm(t *testing.T, file, line string) {
	t.Helper()
	if err := os.WriteFile(file+".new", []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

// killHost SIGKILLs h's gpud, if it still runs, and every worker left in
// its namespace, as a host that crashes loses them all.
func killHost(t *testing.T, h *harness.Host, c *harness.Cluster) {
	t.Helper()
	if h.Running() {
		h.Kill()
	}
	ns := map[uint64]bool{netnsInode(t, h.NS): true}
	waitFor(t, 10*time.Second, "the workers of "+h.Name+" to die", func() bool {
		ws := workerPIDs(c.Build.Gpud, ns)
		for _, pids := range ws {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return len(ws) == 0
	})
}

func netnsInode(t *testing.T, ns string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &st); err != nil {
		t.Fatalf("network namespace %s: %v", ns, err)
	}
	return st.Ino
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func mustIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !ok(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
