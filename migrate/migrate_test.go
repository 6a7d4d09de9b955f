package migrate

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/checkpointtest"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/restore"
	"github.com/gpuctl/gpuctl/tenant"
)

func TestMain(m *testing.M) { proctest.Main(m) }

// pusher copies an image from A's store into B's, as a chunk push would.
type pusher struct {
	from, to *checkpointtest.Images
	fail     error
}

func (p *pusher) Push(_ context.Context, image string, _ *control.Client) (PushStats, error) {
	if p.fail != nil {
		return PushStats{}, p.fail
	}
	n, err := p.from.CopyTo(p.to, image)
	return PushStats{Chunks: 1, Bytes: n}, err
}

// hostB is a second gpud's API: GET /v1/host and the real restore route.
func hostB(t *testing.T, store *checkpointtest.Images, tab *checkpointtest.Sessions, reportBackend, restoreBackend, socketNS string, tenants ...api.Tenant) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/host", func(w http.ResponseWriter, r *http.Request) {
		control.WriteJSON(w, map[string]any{"backend": reportBackend, "listen": "127.0.0.1:17070", "socket_ns": socketNS,
			"gpus": []map[string]any{{"index": 0, "name": "emulated", "uuid": "GPU-b"}}, "tenants": tenants})
	})
	svc := &restore.Service{
		Restorer: &restore.Restorer{WorkDir: t.TempDir(), Store: store, Reattach: &checkpointtest.Reattacher{}, Backend: restoreBackend},
		Sessions: tab, Listen: "127.0.0.1:17070",
	}
	svc.Register(mux)
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestMigrate(t *testing.T) {
	h := proctest.New(t)
	const id = "s-0000000000b1"
	cases := []struct {
		name           string
		to             string // "" = host B
		reportBackend  string
		restoreBackend string
		pushErr        error
		checkErr       error
		movedErr       error // the moved notice cannot be written (failpoint migrate/moved)
		wantStep       string
		wantKind       errs.Kind
		wantCalls      string       // on A's worker
		owner          string       // the session's tenant
		bTenants       []api.Tenant // B's tenants
	}{
		{name: "moves", reportBackend: "emulated", restoreBackend: "emulated", wantCalls: "quiesce detach"},
		// B has adopted the session when the notice fails: undoing now would
		// run the session on both hosts, so the migration stands.
		{name: "client not told", reportBackend: "emulated", restoreBackend: "emulated", wantCalls: "quiesce detach",
			movedErr: errors.New("client link down")},
		{name: "target down", to: "127.0.0.1:1", wantStep: "precheck", wantKind: errs.Unavailable},
		{name: "target on another backend", reportBackend: "cuda", restoreBackend: "cuda", wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "target has no matching GPU", reportBackend: "emulated", restoreBackend: "emulated", checkErr: errs.New(errs.FailedPrecondition, "", "no GPU of the session's model"),
			wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "push fails", reportBackend: "emulated", restoreBackend: "emulated", pushErr: errs.New(errs.ResourceExhausted, "", "disk full"),
			wantStep: "push", wantKind: errs.ResourceExhausted, wantCalls: "quiesce detach reattach resume"},
		{name: "target cannot restore", reportBackend: "emulated", restoreBackend: "cuda",
			wantStep: "restore", wantKind: errs.FailedPrecondition, wantCalls: "quiesce detach reattach resume"},
		{name: "a tenant's session moves", reportBackend: "emulated", restoreBackend: "emulated", wantCalls: "quiesce detach",
			owner: "alice", bTenants: []api.Tenant{{Name: "alice", TokenFingerprint: "fp-a"}}},
		{name: "target does not know the tenant", reportBackend: "emulated", restoreBackend: "emulated", owner: "alice",
			bTenants: []api.Tenant{{Name: "bob", TokenFingerprint: "fp-b"}}, wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "target knows the tenant by another token", reportBackend: "emulated", restoreBackend: "emulated", owner: "alice",
			bTenants: []api.Tenant{{Name: "alice", TokenFingerprint: "fp-x"}}, wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "tenant at its session limit on the target", reportBackend: "emulated", restoreBackend: "emulated", owner: "alice",
			bTenants: []api.Tenant{{Name: "alice", TokenFingerprint: "fp-a", MaxSessions: 1, Sessions: 1}}, wantStep: "precheck", wantKind: errs.ResourceExhausted},
		{name: "tenant without room for the memory on the target", reportBackend: "emulated", restoreBackend: "emulated", owner: "alice",
			bTenants: []api.Tenant{{Name: "alice", TokenFingerprint: "fp-a", MaxMemBytes: 3 << 20, MemBytes: 2 << 20}}, wantStep: "precheck", wantKind: errs.ResourceExhausted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var fp failpoint.Set
			if c.movedErr != nil {
				fp.On("migrate/moved", failpoint.Fail(c.movedErr))
				ctx = failpoint.With(ctx, &fp)
			}
			child := h.Start(false)
			pid := child.Process.Pid
			calls := &checkpointtest.Calls{}
			w := checkpointtest.Worker{Pid: pid, Calls: calls}
			tabA, tabB := checkpointtest.NewSessions(), checkpointtest.NewSessions()
			tabA.Add(id, w, "")
			tabA.Own(id, c.owner)
			storeA, storeB := checkpointtest.NewImages(t), checkpointtest.NewImages(t)
			to := c.to
			if to == "" {
				to = hostB(t, storeB, tabB, c.reportBackend, c.restoreBackend, "", c.bTenants...)
			}
			svc := &Service{
				Checkpoint: &checkpoint.Service{
					Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: storeA, Reattach: &checkpointtest.Reattacher{Calls: calls}, Backend: "emulated"},
					Sessions: tabA,
				},
				Push:    &pusher{from: storeA, to: storeB, fail: c.pushErr},
				Token:   "tok",
				Backend: "emulated",
				SessionTenancy: func(context.Context, string) (Tenancy, error) {
					return Tenancy{Tenant: c.owner, Fingerprint: "fp-a", AllocBytes: 2 << 20}, nil
				},
			}
			if c.checkErr != nil {
				svc.CheckTarget = func(h backend.HostInfo) error {
					if len(h.GPUs) != 1 || h.GPUs[0].UUID != "GPU-b" {
						t.Errorf("CheckTarget got %+v, want B's host info", h)
					}
					return c.checkErr
				}
			}
			before := h.Counting(pid)
			t0 := time.Now()
			res, err := svc.Migrate(ctx, id, to)
			if got := calls.String(); got != c.wantCalls {
				t.Errorf("A's worker saw %q, want %q", got, c.wantCalls)
			}
			if c.wantStep != "" {
				named := to // the error names the target host, except a push's
				if c.wantStep == "push" {
					named = ""
				}
				checkpointtest.WantFailedStep(t, err, c.wantStep, c.wantKind, named)
				if c.wantStep == "precheck" && time.Since(t0) > 5*time.Second {
					t.Errorf("a dead target took %v to fail", time.Since(t0))
				}
				if s := tabA.State(id); s != "running" {
					t.Errorf("session on A is %q, want running", s)
				}
				if s := tabB.State(id); s != "" {
					t.Errorf("session on B is %q after a failed migration", s)
				}
				h.Counting(pid) // still running on A
				return
			}
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			if res.Session != id || res.To != to || res.Listen != "127.0.0.1:17070" || res.SentBytes <= 0 || res.Image == "" {
				t.Errorf("result %+v", res)
			}
			if res.DowntimeMS < 0 || res.DowntimeMS > res.DurationMS+1 {
				t.Errorf("downtime %d ms of %d ms", res.DowntimeMS, res.DurationMS)
			}
			if c.movedErr != nil && fp.Hits("migrate/moved") != 1 {
				t.Errorf("migrate/moved reached %d times", fp.Hits("migrate/moved"))
			}
			if tabA.State(id) != "stopped" || tabA.MovedTo(id) != "127.0.0.1:17070" {
				t.Errorf("A: state %q moved %q", tabA.State(id), tabA.MovedTo(id))
			}
			if tabB.State(id) != "detached" {
				t.Errorf("B: state %q, want detached (waiting for the client)", tabB.State(id))
			}
			// The owner travels with the image and owns the session on B.
			if m, _ := storeB.Meta(res.Image); m.Tenant != c.owner || tabB.Owner(id) != c.owner {
				t.Errorf("on B the image is tenant %q's and the session %q's, want %q's", m.Tenant, tabB.Owner(id), c.owner)
			}
			if err := child.Wait(); err == nil {
				t.Error("A's worker exited cleanly; it should have been released (killed)")
			}
			bpid := tabB.Worker(id).PID()
			if bpid == pid {
				t.Fatalf("B's worker has A's pid %d", pid)
			}
			if n := h.Next(bpid); n < before {
				t.Errorf("B's worker counts from %d, below the %d A reached: memory lost", n, before)
			}
			h.Counting(bpid)
			_ = syscall.Kill(bpid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(bpid, &ws, 0, nil); err != nil && !errors.Is(err, syscall.ECHILD) {
				t.Errorf("reap B's worker: %v", err)
			}
		})
	}
}

func TestMigrateBadInput(t *testing.T) {
	svc := &Service{Checkpoint: &checkpoint.Service{Sessions: checkpointtest.NewSessions()}}
	cases := []struct{ id, to string }{
		{"not-a-session", "127.0.0.1:1"},
		{"s-0000000000b1", ""},
	}
	for _, c := range cases {
		if _, err := svc.Migrate(context.Background(), c.id, c.to); !errs.IsInvalidArgument(err) {
			t.Errorf("Migrate(%q, %q) = %v, want invalid argument", c.id, c.to, err)
		}
	}
}

// A session the caller may not see is not found at the precheck, before
// anything that depends on the session, exactly as a missing one.
func TestMigrateSessionNotTheCallers(t *testing.T) {
	const id = "s-0000000000b1"
	tab := checkpointtest.NewSessions()
	tab.Add(id, checkpointtest.Worker{Pid: 1, Calls: &checkpointtest.Calls{}}, "")
	tab.Own(id, "alice")
	to := hostB(t, checkpointtest.NewImages(t), checkpointtest.NewSessions(), "emulated", "emulated", "")
	svc := &Service{Checkpoint: &checkpoint.Service{Sessions: tab}, Token: "tok", Backend: "emulated",
		SessionBytes: func(context.Context, string) (uint64, error) {
			t.Error("the session's memory was looked at")
			return 0, nil
		}}
	asBob := tenant.NewContext(context.Background(), tenant.Principal{Tenant: "bob"})
	_, err := svc.Migrate(asBob, id, to)
	if !errs.IsNotFound(err) || checkpoint.FailedStep(err) != "precheck" {
		t.Errorf("another tenant's session: %v, want not found at the precheck", err)
	}
	if s := tab.State(id); s != "running" {
		t.Errorf("the session is %q, want untouched", s)
	}
}

// TestMigrateHandover: when B shares A's abstract socket names, A releases
// its frozen worker before B restores, and a failure on B restores the
// image on A instead of resuming the released worker.
func TestMigrateHandover(t *testing.T) {
	h := proctest.New(t)
	const id, ns = "s-0000000000c1", "machine/net:1"
	for _, c := range []struct {
		name, restoreBackend string
		wantErr              bool
	}{
		{"moves", "emulated", false},
		{"target cannot restore", "cuda", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			child := h.Start(false)
			calls := &checkpointtest.Calls{}
			w := checkpointtest.Worker{Pid: child.Process.Pid, Calls: calls}
			tabA, tabB := checkpointtest.NewSessions(), checkpointtest.NewSessions()
			tabA.Add(id, w, "")
			storeA, storeB := checkpointtest.NewImages(t), checkpointtest.NewImages(t)
			to := hostB(t, storeB, tabB, "emulated", c.restoreBackend, ns)
			var restoredHere []string
			svc := &Service{
				Checkpoint: &checkpoint.Service{
					Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: storeA, Reattach: &checkpointtest.Reattacher{Calls: calls}, Backend: "emulated"},
					Sessions: tabA,
				},
				Push: &pusher{from: storeA, to: storeB}, Token: "tok", Backend: "emulated", SocketNS: ns,
				RestoreHere: func(_ context.Context, image string) error {
					restoredHere = append(restoredHere, image)
					return nil
				},
			}
			res, err := svc.Migrate(ctx, id, to)
			if got := calls.String(); got != "quiesce detach" {
				t.Errorf("A's worker saw %q; a handed-over worker is never resumed", got)
			}
			exited := make(chan error, 1)
			go func() { exited <- child.Wait() }()
			select {
			case werr := <-exited:
				if werr == nil {
					t.Error("A's frozen worker exited by itself; it should have been killed")
				}
			case <-time.After(10 * time.Second):
				t.Error("A's frozen worker was not released")
			}
			if !c.wantErr {
				if err != nil || res.Session != id {
					t.Fatalf("migrate: %+v, %v", res, err)
				}
				if len(restoredHere) != 0 {
					t.Errorf("restored on A after a successful migration: %v", restoredHere)
				}
				return
			}
			if err == nil || checkpoint.FailedStep(err) != "restore" {
				t.Fatalf("want a failure at restore, got %v", err)
			}
			if len(restoredHere) != 1 || restoredHere[0] == "" {
				t.Errorf("the image was not restored on A after B failed: %v", restoredHere)
			}
		})
	}
}
