package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// The chaos soak: clients run the stateful program (which checks every
// step against a CPU replay) on three hosts while a driver does, at random
// moments, one thing at a time to a random session, host or client:
// checkpoints that leave the session running, migrations, preemptions
// (checkpoint and release, then restore), cuts of a client's link, gpud
// killed with SIGKILL and restarted, a worker killed with SIGKILL, and
// removals of old images. After every event, and at the end, it checks:
//
//   - no session runs twice: live on at most one host, at most one worker
//     process, and that process is the one the host lists;
//   - no worker process leaks: every worker of this build belongs to a
//     session a host lists as live;
//   - the touched hosts' stores verify clean;
//   - every client finishes bit-exact (its own replay, and the same
//     RESULT as every other) or exits with a clear CUDA error, and only
//     when its session was killed (its gpud or its worker); none hangs;
//   - at the end, gc leaves nothing for a second gc, and every store
//     verifies clean.
//
// GPUCTL_SOAK is how long events are generated (a Go duration; default
// 60s, which `make test` runs; `make soak` runs longer), GPUCTL_SOAK_SEED
// the seed of every random choice (printed, so that a failure can be
// replayed; the timing of the processes is not replayed).
func TestSoak(t *testing.T) {
	dur := 60 * time.Second
	if v := os.Getenv("GPUCTL_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			t.Fatalf("GPUCTL_SOAK=%q: want a duration such as 60s or 10m", v)
		}
		if d == 0 {
			t.Skip("GPUCTL_SOAK=0")
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GPUCTL_SOAK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("GPUCTL_SOAK_SEED=%q: want a number", v)
		}
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	t.Logf("soak: %v of events, seed %d (replay the choices with GPUCTL_SOAK_SEED=%d)", dur, seed, seed)
	s := newSoak(t, seed)
	defer func() {
		if t.Failed() {
			t.Logf("soak failed; replay the choices with GPUCTL_SOAK_SEED=%d", seed)
		}
	}()
	s.run(dur)
}

// Client programs: 1 MiB stepped with a short sleep (each job runs ten to
// twenty seconds on the emulated device), and a bound far above that for a
// job that hangs.
const (
	soakMiB     = 1
	soakSteps   = 120
	soakSleepMS = 40
	soakClients = 3
	soakJobMax  = 3 * time.Minute
)

type soak struct {
	t       *testing.T
	c       *harness.Cluster
	rng     *rand.Rand
	hosts   []*harness.Host
	clients []*harness.Node
	prog    string
	env     []string
	gpud    string // our gpud binary, to tell our workers from others'
	// netns are the network namespaces of our hosts (their inodes): the
	// workers of gpuds that other tests run at the same time, from the same
	// binary, live in other namespaces and are not ours to judge.
	netns map[uint64]bool

	mu       sync.Mutex
	jobs     []*soakJob
	victims  map[string]string // session id -> the event that killed it
	kills    []gpudKill        // gpuds killed: their sessions die
	events   map[string]*eventCount
	failures []string // invariant violations
}

// gpudKill is a gpud killed at a time: a client that was on it then may
// have lost its session even when no listing named it (one starting
// there just then).
type gpudKill struct {
	listen   string
	at, back time.Time // killed; answering again
}

type eventCount struct {
	done, refused int
	why           map[string]int
}

// soakJob is one run of the client program.
type soakJob struct {
	client  string
	session string
	start   time.Time
	took    time.Duration
	stall   time.Duration // longest gap between two lines of progress
	code    int           // exit status; -1: it hung
	stdout  string
	stderr  string
	result  string // the RESULT line
}

func newSoak(t *testing.T, seed uint64) *soak {
	c := harness.New(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("soak-%d\n", seed)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &soak{t: t, c: c, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		victims: map[string]string{}, events: map[string]*eventCount{}}
	s.netns = map[uint64]bool{}
	for _, name := range []string{"a", "b", "c"} {
		h := c.NewHost(name, harness.HostOptions{TokenFile: tok, Args: []string{"--grace", "10s"}})
		s.hosts = append(s.hosts, h)
		var st syscall.Stat_t
		if err := syscall.Stat("/run/netns/"+h.NS, &st); err != nil {
			t.Fatalf("network namespace of host %s: %v", name, err)
		}
		s.netns[st.Ino] = true
	}
	for i := range soakClients {
		s.clients = append(s.clients, c.NewNode(fmt.Sprintf("client%d", i)))
	}
	s.prog = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	s.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx"), "GPUCTL_DEBUG=1",
		"GPUCTL_RECONNECT_TIMEOUT=30"}
	var err error
	if s.gpud, err = filepath.EvalSymlinks(c.Build.Gpud); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *soak) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
	s.t.Errorf("invariant: %s", msg)
}

// run drives clients and events for dur, then lets the clients finish and
// checks the end state.
func (s *soak) run(dur time.Duration) {
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i, cl := range s.clients {
		// Each client picks its hosts with a generator of its own, seeded
		// from the soak's: the event driver keeps the shared one.
		rng := rand.New(rand.NewPCG(s.rng.Uint64(), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				s.job(cl, rng)
			}
		}()
	}
	time.Sleep(2 * time.Second) // the first sessions exist
	n := 0
	for time.Now().Before(deadline) && !s.t.Failed() {
		s.event()
		n++
		s.check()
		time.Sleep(time.Duration(300+s.rng.IntN(1700)) * time.Millisecond)
	}
	wg.Wait()
	s.check()
	s.end()
	s.report()
}

// job runs the client program once against a random live host and
// records how it ended.
func (s *soak) job(cl *harness.Node, rng *rand.Rand) {
	h := s.hosts[rng.IntN(len(s.hosts))]
	j := &soakJob{client: cl.Name, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), soakJobMax)
	defer cancel()
	cmd := cl.Command(ctx, s.c.Build.Gpuctl, "run", "--server", h.Listen(), "--token-file", h.TokenFile, "--",
		s.prog, strconv.Itoa(soakMiB), strconv.Itoa(soakSteps), strconv.Itoa(soakSleepMS))
	cmd.Env = append(os.Environ(), s.env...)
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		s.t.Error(err)
		return
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		s.t.Error(err)
		return
	}
	var stdout strings.Builder
	last := time.Now()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		now := time.Now()
		if gap := now.Sub(last); gap > j.stall {
			j.stall = gap
		}
		last = now
		line := sc.Text()
		stdout.WriteString(line + "\n")
		if strings.HasPrefix(line, "RESULT ") {
			j.result = line
		}
	}
	err = cmd.Wait()
	j.took = time.Since(j.start)
	j.stdout, j.stderr = stdout.String(), stderr.String()
	if m := sessionLine.FindStringSubmatch(j.stderr); m != nil {
		j.session = m[1]
	}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		j.code = -1
	case errors.As(err, &ee):
		j.code = ee.ExitCode()
	case err != nil:
		s.t.Errorf("run the client: %v", err)
	}
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	s.judge(j)
}

var (
	sessionLine = regexp.MustCompile(`connected to \S+, session (s-[0-9a-f]{12})`)
	lostLine    = regexp.MustCompile(`the session is lost \((.*)\); every CUDA call`)
	addrRE      = regexp.MustCompile(`\d+\.\d+\.\d+\.\d+:\d+`)
	countRE     = regexp.MustCompile(`(request|for) \d+`)
	cudaFail    = regexp.MustCompile(`FAIL: .* returned (CUDA_ERROR_[A-Z_]+)`)
)

// judge checks how one job ended.
func (s *soak) judge(j *soakJob) {
	s.mu.Lock()
	killed := s.victims[j.session]
	for _, k := range s.kills {
		if strings.Contains(j.stderr, k.listen) && k.at.Before(j.start.Add(j.took)) && (k.back.IsZero() || k.back.After(j.start)) {
			killed = "gpud SIGKILL at " + k.listen
		}
	}
	s.mu.Unlock()
	switch {
	case j.code == -1:
		s.violation("client %s (session %s) hung for %v\nstdout:\n%s\nstderr:\n%s", j.client, j.session, soakJobMax, tail(j.stdout), j.stderr)
	case j.code == 0:
		if j.result == "" {
			s.violation("client %s (session %s) exited 0 without a RESULT:\n%s", j.client, j.session, tail(j.stdout))
		}
	case strings.Contains(j.stderr, "device checksum"):
		s.violation("client %s (session %s) computed a wrong result:\n%s", j.client, j.session, j.stderr)
	case strings.Contains(j.stderr, "had been acknowledged"):
		s.violation("client %s (session %s) was resumed from an older state:\n%s", j.client, j.session, j.stderr)
	case cudaFail.FindStringSubmatch(j.stderr) == nil:
		s.violation("client %s (session %s) exited %d without a clear CUDA error:\n%s", j.client, j.session, j.code, j.stderr)
	case killed == "":
		s.violation("client %s (session %s) failed although nothing killed its session:\n%s", j.client, j.session, j.stderr)
	}
}

// errorKind is a failed job's CUDA error and why the library lost its
// session, for the table.
func errorKind(j *soakJob) string {
	k := "?"
	if m := cudaFail.FindStringSubmatch(j.stderr); m != nil {
		k = m[1]
	}
	if m := lostLine.FindStringSubmatch(j.stderr); m != nil {
		why := addrRE.ReplaceAllString(m[1], "HOST")
		why = countRE.ReplaceAllString(why, "$1 N")
		k += ": " + why
	}
	return k
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// listed is one session as a host lists it.
type listed struct {
	ID        string `json:"id"`
	State     string `json:"state"`
	WorkerPID int    `json:"worker_pid"`
	Epoch     int    `json:"epoch"`
	host      *harness.Host
}

func (s *soak) ctl(h *harness.Host, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return h.Gpuctl(ctx, args...)
}

func (s *soak) sessions() []listed {
	var all []listed
	for _, h := range s.hosts {
		out, err := s.ctl(h, "sessions", "--json")
		if err != nil {
			s.violation("list the sessions of %s: %v", h.Name, err)
			continue
		}
		var ss []listed
		if err := json.Unmarshal([]byte(out), &ss); err != nil {
			s.violation("sessions --json of %s: %v", h.Name, err)
			continue
		}
		for i := range ss {
			ss[i].host = h
		}
		all = append(all, ss...)
	}
	return all
}

func live(state string) bool { return state != "stopped" }

// event does one random thing and records how it went.
func (s *soak) event() {
	kinds := []struct {
		name   string
		weight int
		do     func() (string, error)
	}{
		{"checkpoint --leave-running", 3, s.checkpoint},
		{"migrate", 3, s.migrate},
		{"preempt, restore", 2, s.preempt},
		{"client link cut", 2, s.cutLink},
		{"worker SIGKILL", 1, s.killWorker},
		{"gpud SIGKILL, restart", 1, s.killGpud},
		{"image rm, gc", 1, s.removeImage},
	}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	pick := s.rng.IntN(total)
	for _, k := range kinds {
		if pick -= k.weight; pick >= 0 {
			continue
		}
		what, err := k.do()
		s.mu.Lock()
		ec := s.events[k.name]
		if ec == nil {
			ec = &eventCount{why: map[string]int{}}
			s.events[k.name] = ec
		}
		switch {
		case what == "":
			// Nothing to do it to (no live session): not counted.
		case err != nil:
			ec.refused++
			ec.why[refusal(err)]++
		default:
			ec.done++
		}
		s.mu.Unlock()
		if err != nil {
			s.t.Logf("event %s (%s): %v", k.name, what, err)
			if strings.Contains(err.Error(), "exit status 1:") || strings.Contains(err.Error(), "exit status 7:") {
				s.violation("event %s (%s) failed inside gpud: %v", k.name, what, err)
			}
		} else if what != "" {
			s.t.Logf("event %s: %s", k.name, what)
		}
		return
	}
}

// refusal names why gpuctl refused an event, by its exit status.
func refusal(err error) string {
	for code, kind := range map[string]string{"3": "not found", "4": "unavailable", "6": "failed precondition", "7": "data loss", "1": "internal"} {
		if strings.Contains(err.Error(), "exit status "+code+":") {
			return kind
		}
	}
	return "other"
}

// running picks a session a host lists as running, or nil.
func (s *soak) running() *listed {
	var rs []listed
	for _, l := range s.sessions() {
		if l.State == "running" {
			rs = append(rs, l)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].ID < rs[j].ID })
	l := rs[s.rng.IntN(len(rs))]
	return &l
}

func (s *soak) checkpoint() (string, error) {
	l := s.running()
	if l == nil {
		return "", nil
	}
	_, err := s.ctl(l.host, "checkpoint", l.ID, "--leave-running")
	return l.ID + " on " + l.host.Name, err
}

func (s *soak) migrate() (string, error) {
	l := s.running()
	if l == nil {
		return "", nil
	}
	var to *harness.Host
	for to == nil || to == l.host {
		to = s.hosts[s.rng.IntN(len(s.hosts))]
	}
	_, err := s.ctl(l.host, "migrate", l.ID, "--to", to.API())
	return l.ID + " " + l.host.Name + "->" + to.Name, err
}

func (s *soak) preempt() (string, error) {
	l := s.running()
	if l == nil {
		return "", nil
	}
	what := l.ID + " on " + l.host.Name
	out, err := s.ctl(l.host, "checkpoint", l.ID, "--json")
	if err != nil {
		return what, err
	}
	var ck checkpointResult
	if err := json.Unmarshal([]byte(out), &ck); err != nil {
		return what, err
	}
	off := time.Duration(500+s.rng.IntN(2500)) * time.Millisecond
	time.Sleep(off) // preempted: nothing of it runs
	_, err = s.ctl(l.host, "restore", ck.Image)
	return fmt.Sprintf("%s, off the device %v", what, off.Round(time.Millisecond)), err
}

func (s *soak) cutLink() (string, error) {
	cl := s.clients[s.rng.IntN(len(s.clients))]
	d := time.Duration(500+s.rng.IntN(2500)) * time.Millisecond
	<-cl.CutLink(d)
	return fmt.Sprintf("%s for %v", cl.Name, d.Round(time.Millisecond)), nil
}

func (s *soak) killWorker() (string, error) {
	var ws []listed
	for _, l := range s.sessions() {
		if live(l.State) && l.WorkerPID > 0 {
			ws = append(ws, l)
		}
	}
	if len(ws) == 0 {
		return "", nil
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].ID < ws[j].ID })
	l := ws[s.rng.IntN(len(ws))]
	s.mu.Lock()
	s.victims[l.ID] = "worker SIGKILL"
	s.mu.Unlock()
	if err := syscall.Kill(l.WorkerPID, syscall.SIGKILL); err != nil {
		return l.ID, fmt.Errorf("kill worker %d: %w", l.WorkerPID, err)
	}
	return fmt.Sprintf("%s (pid %d) on %s", l.ID, l.WorkerPID, l.host.Name), nil
}

func (s *soak) killGpud() (string, error) {
	h := s.hosts[s.rng.IntN(len(s.hosts))]
	s.mu.Lock()
	for _, l := range s.sessionsLocked(h) {
		if live(l.State) {
			s.victims[l.ID] = "gpud SIGKILL on " + h.Name
		}
	}
	s.kills = append(s.kills, gpudKill{listen: h.Listen(), at: time.Now()})
	k := &s.kills[len(s.kills)-1]
	s.mu.Unlock()
	h.Kill()
	off := time.Duration(200+s.rng.IntN(1800)) * time.Millisecond
	time.Sleep(off)
	err := h.Restart()
	s.mu.Lock()
	k.back = time.Now()
	s.mu.Unlock()
	if err != nil {
		s.violation("%v", err)
		return h.Name, err
	}
	return fmt.Sprintf("%s, down %v", h.Name, off.Round(time.Millisecond)), nil
}

// sessionsLocked lists one host's sessions; the caller holds s.mu (the
// listing does not touch the soak's state).
func (s *soak) sessionsLocked(h *harness.Host) []listed {
	out, err := s.ctl(h, "sessions", "--json")
	if err != nil {
		return nil
	}
	var ss []listed
	_ = json.Unmarshal([]byte(out), &ss)
	return ss
}

// removeImage removes a random image of a host and collects garbage: the
// store must then verify clean.
func (s *soak) removeImage() (string, error) {
	h := s.hosts[s.rng.IntN(len(s.hosts))]
	out, err := s.ctl(h, "images", "ls", "--json")
	if err != nil {
		return h.Name, err
	}
	var imgs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(out), &imgs); err != nil {
		return h.Name, err
	}
	if len(imgs) == 0 {
		return "", nil
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].ID < imgs[j].ID })
	id := imgs[s.rng.IntN(len(imgs))].ID
	if _, err := s.ctl(h, "images", "rm", id); err != nil {
		return id, err
	}
	_, err = s.ctl(h, "images", "gc")
	return id + " on " + h.Name, err
}

// check verifies the invariants that hold between events. Processes exit
// asynchronously (a killed worker is reaped, an ended session's worker
// exits), so a check that fails is retried for a few seconds first.
func (s *soak) check() {
	var last []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		last = s.checkOnce()
		if len(last) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, v := range last {
		s.violation("%s", v)
	}
	for _, h := range s.hosts {
		s.verify(h)
	}
}

func (s *soak) checkOnce() []string {
	var bad []string
	ls := s.sessions()
	liveOn := map[string][]listed{}
	for _, l := range ls {
		if live(l.State) {
			liveOn[l.ID] = append(liveOn[l.ID], l)
		}
	}
	for id, on := range liveOn {
		if len(on) > 1 {
			var where []string
			for _, l := range on {
				where = append(where, l.host.Name+":"+l.State)
			}
			bad = append(bad, fmt.Sprintf("session %s is live on %d hosts: %v", id, len(on), where))
		}
	}
	workers := s.workers()
	for id, pids := range workers {
		if len(pids) > 1 {
			bad = append(bad, fmt.Sprintf("session %s has %d worker processes: %v", id, len(pids), pids))
		}
		for _, pid := range pids {
			if !slices.ContainsFunc(liveOn[id], func(l listed) bool { return l.WorkerPID == pid }) {
				bad = append(bad, fmt.Sprintf("worker %d of session %s is not the worker of a live session (leaked or a second copy); listed: %+v", pid, id, liveOn[id]))
			}
		}
	}
	return bad
}

// workers lists the worker processes of our hosts by session, zombies
// excluded.
func (s *soak) workers() map[string][]int { return workerPIDs(s.gpud, s.netns) }

// workerPIDs lists the worker processes of the gpud binary that run in
// the network namespaces netns (by inode; see netnsInode), by session,
// zombies excluded: workers of gpuds that parallel tests run from the
// same binary live in other namespaces.
func workerPIDs(gpud string, netns map[uint64]bool) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != gpud {
			continue
		}
		var ns syscall.Stat_t
		if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &ns); err != nil || !netns[ns.Ino] {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) < 2 || args[1] != "worker" {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		for i := 1; i+1 < len(args); i++ {
			if args[i] == "--session" {
				out[args[i+1]] = append(out[args[i+1]], pid)
			}
		}
	}
	return out
}

func (s *soak) verify(h *harness.Host) {
	out, err := s.ctl(h, "images", "verify", "--json")
	if err != nil {
		s.violation("images verify on %s: %v", h.Name, err)
		return
	}
	var r struct {
		Damaged []json.RawMessage `json:"damaged"`
		Index   string            `json:"index"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Damaged) > 0 || r.Index != "" {
		s.violation("images verify on %s is not clean: %v %s", h.Name, err, out)
	}
}

// end checks what must hold once every client is done: garbage
// collection leaves nothing for a second pass, and the stores verify.
func (s *soak) end() {
	for _, h := range s.hosts {
		if _, err := s.ctl(h, "images", "gc", "--json"); err != nil {
			s.violation("gc on %s: %v", h.Name, err)
			continue
		}
		out, err := s.ctl(h, "images", "gc", "--json")
		if err != nil {
			s.violation("second gc on %s: %v", h.Name, err)
			continue
		}
		var gc struct {
			Chunks  int `json:"chunks_removed"`
			Packs   int `json:"packs_removed"`
			Orphans int `json:"orphan_files"`
		}
		if err := json.Unmarshal([]byte(out), &gc); err != nil || gc.Chunks+gc.Packs+gc.Orphans != 0 {
			s.violation("a second gc on %s still found garbage (orphans of the first): %v %s", h.Name, err, out)
		}
		s.verify(h)
	}
}

// report prints the table: events of each kind, sessions completed,
// errors by kind, the longest client stall.
func (s *soak) report() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-28s %6s %8s  %s\n", "event", "done", "refused", "why refused")
	names := make([]string, 0, len(s.events))
	for n := range s.events {
		names = append(names, n)
	}
	sort.Strings(names)
	total := 0
	for _, n := range names {
		ec := s.events[n]
		total += ec.done
		var why []string
		for w, c := range ec.why {
			why = append(why, fmt.Sprintf("%s %d", w, c))
		}
		sort.Strings(why)
		fmt.Fprintf(&b, "%-28s %6d %8d  %s\n", n, ec.done, ec.refused, strings.Join(why, ", "))
	}
	fmt.Fprintf(&b, "%-28s %6d\n", "events survived", total)
	completed, failed, hung := 0, 0, 0
	kinds := map[string]int{}
	results := map[string]int{}
	var worst *soakJob
	for _, j := range s.jobs {
		switch {
		case j.code == 0:
			completed++
			results[j.result]++
		case j.code == -1:
			hung++
		default:
			failed++
			kinds[errorKind(j)]++
		}
		if worst == nil || j.stall > worst.stall {
			worst = j
		}
	}
	fmt.Fprintf(&b, "\nsessions: %d completed bit-exact, %d ended with a CUDA error, %d hung\n", completed, failed, hung)
	var ks []string
	for k := range kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "  %4d  %s\n", kinds[k], k)
	}
	if worst != nil {
		fmt.Fprintf(&b, "longest client stall: %v (client %s, session %s)\n", worst.stall.Round(time.Millisecond), worst.client, worst.session)
	}
	fmt.Fprintf(&b, "invariant violations: %d\n", len(s.failures))
	s.t.Log(b.String())
	if len(results) > 1 {
		s.t.Errorf("completed runs disagree on the result: %v", results)
	}
	if completed == 0 {
		s.t.Errorf("no client completed: the soak proved nothing")
	}
}
