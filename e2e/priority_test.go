package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// labelledSession is a listing with the preemption fields.
type labelledSession struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Priority int32             `json:"priority"`
	Labels   map[string]string `json:"labels"`
	MemBytes uint64            `json:"mem_bytes"`
	Image    string            `json:"image"`
}

func (w *world) labelled(h *harness.Host, sel string) []labelledSession {
	w.t.Helper()
	var ss []labelledSession
	w.ctlJSON(h, &ss, "sessions", "--selector", sel)
	return ss
}

// waitState waits until h lists exactly one session labelled sel, in
// state, and returns it.
func (w *world) waitState(h *harness.Host, sel, state string, within time.Duration) labelledSession {
	w.t.Helper()
	deadline := time.Now().Add(within)
	var last []labelledSession
	for time.Now().Before(deadline) {
		last = w.labelled(h, sel)
		if len(last) == 1 && last[0].State == state {
			return last[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.t.Fatalf("%s: no single session %s in state %s within %v; last listing %+v\n%s", h.Name, sel, state, within, last, h.Log())
	return labelledSession{}
}

// waitNoSessions waits until h's earlier sessions (a reference run's,
// ended by its client's exit) are gone and hold no device memory.
func (w *world) waitNoSessions(h *harness.Host, within time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for len(w.sessions(h)) > 0 {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s still lists sessions after %v: %+v", h.Name, within, w.sessions(h))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startWith runs the stateful client with extra environment (priority,
// labels).
func (w *world) startWith(h *harness.Host, env []string, mib, steps, sleepMS int) <-chan harness.Result {
	ch := make(chan harness.Result, 1)
	go func() {
		ch <- w.client.RunClient(h, 4*time.Minute, append(append([]string(nil), w.env...), env...), w.stateful,
			fmt.Sprint(mib), fmt.Sprint(steps), fmt.Sprint(sleepMS))
	}()
	return ch
}

// metric scrapes h's /metrics and returns the value of the sample line
// that starts with name (e.g. `gpud_preemptions_total{reason="memory"}`).
func metric(t *testing.T, h *harness.Host, name string) string {
	t.Helper()
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialInNS(h.NS)}}
	resp, err := cl.Get("http://" + h.API() + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	return ""
}

// The emulated device of these tests holds one stateful client's 1 MiB
// and not two.
const smallDevice = "1572864"

// TestAutomaticPreemption: a session of higher priority that does not
// fit on the device takes the memory of a lower one, which gpud
// checkpoints and releases; a session of equal priority is refused at
// once; when the high one is done the low one is resumed by gpud and
// finishes bit-identical to a run that was never preempted.
func TestAutomaticPreemption(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	c := harness.New(t)
	w := &world{t: t, c: c}
	w.a = c.NewHost("a", harness.HostOptions{Args: []string{"--emulated-mem", smallDevice, "--grace", "2s"}})
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(c.Build.Root + "/e2e/cprogs/stateful.c")
	w.env = []string{"GPUCTL_PTX_DIR=" + c.Build.Root + "/e2e/kernels/ptx"}
	w.requireRoutes(w.a)

	want := w.result(<-w.startWith(w.a, nil, wlMiB, wlSteps, 0))
	w.waitNoSessions(w.a, 15*time.Second)

	low := w.startWith(w.a, []string{"GPUCTL_LABELS=job=low", "GPUCTL_PRIORITY=1"}, wlMiB, wlSteps, wlSleep)
	ls := w.waitState(w.a, "job=low", "running", 30*time.Second)
	if ls.Priority != 1 || ls.Labels["job"] != "low" {
		t.Errorf("low session listed as %+v, want priority 1 and label job=low", ls)
	}
	time.Sleep(500 * time.Millisecond)

	// Equal priority: nothing is preempted, the allocation fails at once.
	t0 := time.Now()
	eq := <-w.startWith(w.a, []string{"GPUCTL_LABELS=job=equal", "GPUCTL_PRIORITY=1"}, wlMiB, 3, 0)
	if eq.Code == 0 || !strings.Contains(eq.Stdout+eq.Stderr, "OUT_OF_MEMORY") {
		t.Errorf("a session of equal priority that does not fit: exit %d, want CUDA_ERROR_OUT_OF_MEMORY\n%s%s", eq.Code, eq.Stdout, eq.Stderr)
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the refused session took %v; it should fail at once", d)
	}
	if s := w.waitState(w.a, "job=low", "running", 5*time.Second); s.ID != ls.ID {
		t.Errorf("the low session changed: %+v", s)
	}

	high := w.startWith(w.a, []string{"GPUCTL_LABELS=job=high", "GPUCTL_PRIORITY=10"}, wlMiB, 6, 50)
	p := w.waitState(w.a, "job=low", "preempted", 30*time.Second)
	if p.ID != ls.ID || p.Image == "" {
		t.Errorf("preempted session listed as %+v, want %s waiting in an image", p, ls.ID)
	}
	w.result(<-high) // its own CPU replay checks it
	if got := w.result(<-low); got != want {
		t.Errorf("preempted and resumed run: %q, never preempted: %q", got, want)
	}
	if v := metric(t, w.a, `gpud_preemptions_total{reason="memory"}`); v != "1" {
		t.Errorf(`gpud_preemptions_total{reason="memory"} = %q, want 1`, v)
	}
	if v := metric(t, w.a, `gpud_preempted_resumes_total{by="gpud"}`); v != "1" {
		t.Errorf(`gpud_preempted_resumes_total{by="gpud"} = %q, want 1`, v)
	}
	if v := metric(t, w.a, "gpud_preemptions_refused_total"); v == "" || v == "0" {
		t.Errorf("gpud_preemptions_refused_total = %q, want at least 1 (the equal-priority session)", v)
	}
	log := w.a.Log()
	for _, s := range []string{"preemption: preempting a session of lower priority", "preemption: allocation cannot be made to fit", "preemption: resuming a preempted session"} {
		if !strings.Contains(log, s) {
			t.Errorf("gpud's log lacks %q", s)
		}
	}
}

// TestPreemptDeadlineSelectorResumeOn is what a scheduler does: preempt a
// labelled session by selector (a deadline too short is rolled back and
// the session keeps running), then resume it on another host, where its
// client follows the "moved to" notice and finishes bit-identical.
func TestPreemptDeadlineSelectorResumeOn(t *testing.T) {
	w := newWorld(t, true)
	want := w.reference()

	run := w.startWith(w.a, []string{"GPUCTL_LABELS=job=42,user=ann", "GPUCTL_PRIORITY=3"}, wlMiB, wlSteps, wlSleep)
	s := w.waitState(w.a, "job=42", "running", 30*time.Second)
	time.Sleep(500 * time.Millisecond)

	// Bad input, each one line, nothing lost.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"preempt", "--selector", "job=nope"}, "no session"},
		{[]string{"preempt", "--selector", "job"}, "KEY=VALUE"},
		{[]string{"preempt", "--selector", "job=42", "--deadline", "1ms"}, "deadline"},
		{[]string{"resume", s.ID}, "not preempted"},
	} {
		out, err := w.ctl(w.a, bad.args...)
		if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Count(strings.TrimSpace(err.Error()), "\n") > 0 {
			t.Errorf("gpuctl %s: %q, %v; want one line about %q", strings.Join(bad.args, " "), out, err, bad.want)
		}
	}
	if got := w.waitState(w.a, "job=42", "running", 10*time.Second); got.ID != s.ID {
		t.Fatalf("after a preemption past its deadline the session is %+v", got)
	}

	var pre []struct {
		Session string `json:"session"`
		Image   string `json:"image"`
		StallMS *int64 `json:"stall_ms"`
	}
	w.ctlJSON(w.a, &pre, "preempt", "--selector", "job=42", "--deadline", "60s")
	if len(pre) != 1 || pre[0].Session != s.ID || pre[0].Image == "" || pre[0].StallMS == nil {
		t.Fatalf("gpuctl preempt --json: %+v", pre)
	}
	w.waitState(w.a, "job=42", "preempted", 5*time.Second)
	// A second preempt by selector has nothing left to do.
	var again []json.RawMessage
	w.ctlJSON(w.a, &again, "preempt", "--selector", "job=42")
	if len(again) != 0 {
		t.Errorf("preempting a preempted session again: %s", again)
	}
	time.Sleep(time.Second) // preempted: nothing of it runs

	var res []struct {
		Session string `json:"session"`
		Host    string `json:"host"`
	}
	w.ctlJSON(w.a, &res, "resume", "--selector", "job=42", "--on", w.b.API())
	if len(res) != 1 || res[0].Session != s.ID || res[0].Host != w.b.API() {
		t.Fatalf("gpuctl resume --json: %+v", res)
	}
	// Listed on B from the resume on, while its client runs: the
	// client's exit ends it (its goodbye reaches B's worker).
	onB := w.labelled(w.b, "user=ann")
	if len(onB) != 1 || onB[0].ID != s.ID || onB[0].Priority != 3 || onB[0].Labels["job"] != "42" {
		t.Errorf("B lists %+v, want %s with priority 3 and its labels", onB, s.ID)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("preempted and resumed on B: %q, never preempted: %q", got, want)
	}
	w.waitNoSessions(w.b, 2*time.Second)
}

// TestPreemptedSurvivesRestart: a gpud restarted while it holds a
// preempted session still lists it (store and session table), its client
// waits through the restart, and the session resumes afterwards.
func TestPreemptedSurvivesRestart(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()
	run := w.startWith(w.a, []string{"GPUCTL_LABELS=job=7"}, wlMiB, wlSteps, wlSleep)
	s := w.waitState(w.a, "job=7", "running", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	if _, err := w.ctl(w.a, "preempt", s.ID); err != nil {
		t.Fatal(err)
	}
	w.a = w.c.Restart(w.a)
	if got := w.waitState(w.a, "job=7", "preempted", 5*time.Second); got.ID != s.ID {
		t.Fatalf("after the restart: %+v", got)
	}
	time.Sleep(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := w.a.Gpuctl(ctx, "resume", s.ID); err != nil {
		t.Fatal(err)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("preempted, restarted and resumed: %q, never preempted: %q", got, want)
	}
}

// TestKubernetesPreStop runs the preStop hook of deploy/k8s's workload pod,
// as the kubelet would (its shell line, with the pod's POD_NAME), against
// a real gpud: the pod's session is preempted within the hook's deadline,
// and resumes to finish bit-identical.
func TestKubernetesPreStop(t *testing.T) {
	w := newWorld(t, false)
	b, err := os.ReadFile(filepath.Join(w.c.Build.Root, "deploy/k8s/workload-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var hook string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "- exec /usr/local/bin/gpuctl preempt") {
			hook = strings.Replace(strings.TrimPrefix(l, "- "), "/usr/local/bin/gpuctl", w.c.Build.Gpuctl, 1)
		}
	}
	if hook == "" {
		t.Fatal("workload-pod.yaml has no preStop line running gpuctl preempt")
	}
	want := w.reference()
	run := w.startWith(w.a, []string{"GPUCTL_LABELS=pod=cuda-job-7f9c,managed-by=gpuctl"}, wlMiB, wlSteps, wlSleep)
	s := w.waitState(w.a, "pod=cuda-job-7f9c", "running", 30*time.Second)
	time.Sleep(500 * time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := w.client.Command(ctx, "sh", "-c", hook)
	cmd.Env = append(os.Environ(), "POD_NAME=cuda-job-7f9c", "GPUCTL_HOST="+w.a.API(), "GPUCTL_TOKEN_FILE="+w.a.TokenFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("preStop hook %q: %v\n%s", hook, err, out)
	}
	if got := w.waitState(w.a, "pod=cuda-job-7f9c", "preempted", 5*time.Second); got.ID != s.ID {
		t.Fatalf("after the preStop hook: %+v", got)
	}
	if _, err := w.ctl(w.a, "resume", "--selector", "pod=cuda-job-7f9c"); err != nil {
		t.Fatal(err)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("preempted by the preStop hook and resumed: %q, never preempted: %q", got, want)
	}
}
