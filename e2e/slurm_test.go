package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// slurm is a single-host Slurm (munged, slurmctld, slurmd) started by a
// test in a node's namespace, with a private configuration, key, socket
// and state directory.
type slurm struct {
	t    *testing.T
	node *harness.Node
	dir  string
	env  []string // SLURM_CONF and whatever jobs should see
	logs map[string]*os.File
	cmds []*exec.Cmd
}

// The preemptible partition's GraceTime, and how long the batch script
// then has before SIGKILL (KillWait). No grace: slurmctld acts on an
// expired one only at its periodic job check, which would make when the
// low job is requeued (if at all before it ends) depend on that check's
// phase; without one it is requeued in the scheduling pass that picks
// the high job.
const (
	slurmGrace    = 0
	slurmKillWait = 30
)

// requireSlurm finds Slurm and munge, installing them (scripts/slurm.sh,
// Debian's packages) when missing; it skips only when they cannot be had.
func requireSlurm(t *testing.T, root string) {
	t.Helper()
	have := func() bool {
		for _, c := range []string{"slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "munged"} {
			if _, err := exec.LookPath(c); err != nil {
				return false
			}
		}
		return true
	}
	if have() {
		return
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts/slurm.sh")).CombinedOutput()
	if err != nil || !have() {
		t.Skipf("Slurm is not installed and scripts/slurm.sh could not install it (apt's slurm-wlm and munge): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// startSlurm starts munged, slurmctld and slurmd in node's namespace: one
// node of one CPU, so that two jobs never run at once, a preemptible
// partition "low" (requeued, GraceTime slurmGrace) and a partition "high"
// above it; the main scheduler runs every 2 s.
func startSlurm(t *testing.T, node *harness.Node, env []string) *slurm {
	t.Helper()
	dir, err := os.MkdirTemp("", "gpuctl-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	s := &slurm{t: t, node: node, dir: dir, logs: map[string]*os.File{}}
	t.Cleanup(s.stop)
	for _, d := range []string{"munge", "state", "spool"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	f, err := os.Open("/dev/urandom")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.Read(key)
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "munge/key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "munge/socket")
	conf := filepath.Join(dir, "slurm.conf")
	text := fmt.Sprintf(`ClusterName=gpuctl
SlurmctldHost=localhost(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=%[2]s
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool
SlurmctldPidFile=%[1]s/slurmctld.pid
SlurmdPidFile=%[1]s/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=2
SelectType=select/linear
MpiDefault=none
ReturnToService=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
KillWait=%[4]d
InactiveLimit=0
MinJobAge=600
NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=1000 State=UNKNOWN
PartitionName=low Nodes=node1 Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=%[3]d OverSubscribe=EXCLUSIVE MaxTime=INFINITE State=UP
PartitionName=high Nodes=node1 PriorityTier=2 PreemptMode=OFF OverSubscribe=EXCLUSIVE MaxTime=INFINITE State=UP
`, dir, sock, slurmGrace, slurmKillWait)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s.env = append(append([]string{}, env...), "SLURM_CONF="+conf)

	s.daemon("munged", "munged", "-F", "-f", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge/key"),
		"--pid-file="+filepath.Join(dir, "munge/pid"), "--seed-file="+filepath.Join(dir, "munge/seed"), "--log-file="+filepath.Join(dir, "munge/log"))
	s.waitFor("munged's socket", func() bool { _, err := os.Stat(sock); return err == nil })
	s.daemon("slurmctld", "slurmctld", "-D", "-i")
	s.daemon("slurmd", "slurmd", "-D", "-N", "node1")
	s.waitIdle()
	return s
}

// waitIdle waits until node1 runs nothing, a requeued job's earlier run
// included: Slurm lists the job pending while that run is still being
// killed, and starting it again before then has the launch refused.
func (s *slurm) waitIdle() {
	s.t.Helper()
	s.waitFor("node1 idle", func() bool {
		out, _ := s.cmd("sinfo", "-h", "-n", "node1", "-o", "%T")
		return strings.TrimSpace(out) == "idle"
	})
}

// daemon starts a Slurm or munge daemon in the foreground, its output in
// a log file of the test's directory.
func (s *slurm) daemon(name string, args ...string) {
	s.t.Helper()
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		s.t.Fatal(err)
	}
	s.logs[name] = log
	cmd := s.command(context.Background(), args[0], args[1:]...)
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	s.cmds = append(s.cmds, cmd)
}

func (s *slurm) waitFor(what string, ok func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			s.t.Fatalf("Slurm: no %s within 30 s\n%s", what, s.logTails())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// command runs name in the node's network namespace only: `ip netns exec`
// would also give it a mount namespace with a fresh /sys, without the
// cgroup filesystem slurmd insists on.
func (s *slurm) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/" + s.node.NS, "--", name}, args...)...)
}

// release lets a requeued job start soon rather than after the two
// minutes Slurm holds it, once its earlier run is gone. Not at once:
// slurmd refuses to launch a job in the second it killed it (it compares
// credential times in whole seconds).
func (s *slurm) release(id string) {
	s.t.Helper()
	s.waitIdle()
	s.must("scontrol", "update", "JobId="+id, "StartTime=now+2")
}

// cmd runs a Slurm command in the node's namespace.
func (s *slurm) cmd(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := s.command(ctx, name, args...)
	c.Env = append(os.Environ(), s.env...)
	c.Dir = s.dir
	out, err := c.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (s *slurm) must(name string, args ...string) string {
	s.t.Helper()
	out, err := s.cmd(name, args...)
	if err != nil {
		s.t.Fatalf("%v\n%s", err, s.logTails())
	}
	return strings.TrimSpace(out)
}

// job returns the fields of `scontrol show job ID` (JobState, Restarts,
// ExitCode, Reason...).
func (s *slurm) job(id string) map[string]string {
	s.t.Helper()
	out := s.must("scontrol", "show", "job", "-o", id)
	m := map[string]string{}
	for _, f := range strings.Fields(out) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	return m
}

// waitJob waits until job id is in one of states and returns its fields.
func (s *slurm) waitJob(id string, within time.Duration, states ...string) map[string]string {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		j := s.job(id)
		for _, st := range states {
			if j["JobState"] == st {
				return j
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s is %s (reason %s), not %v, after %v\n%s", id, j["JobState"], j["Reason"], states, within, s.logTails())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *slurm) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, name))
	return string(b)
}

// logTails is the end of every daemon's log and job output, for a failure.
func (s *slurm) logTails() string {
	var b strings.Builder
	for _, name := range []string{"slurmctld.log", "slurmd.log", "low.err", "high.err"} {
		text := s.read(name)
		lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
		if len(lines) > 25 {
			lines = lines[len(lines)-25:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", name, strings.Join(lines, "\n"))
	}
	return b.String()
}

// stop cancels every job, stops the daemons and kills whatever is left in
// the node's namespace (a job's processes outlive slurmd).
func (s *slurm) stop() {
	if s.t.Failed() {
		s.t.Logf("Slurm's logs:\n%s", s.logTails())
	}
	if len(s.cmds) > 2 {
		_, _ = s.cmd("scancel", "--full", "--user=root")
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if out, err := s.cmd("squeue", "-h", "-t", "running,completing"); err == nil && strings.TrimSpace(out) == "" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for i := len(s.cmds) - 1; i >= 0; i-- {
		c := s.cmds[i]
		_ = c.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	}
	if out, _ := exec.Command("ip", "netns", "pids", s.node.NS).Output(); len(strings.TrimSpace(string(out))) > 0 {
		for _, p := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, f := range s.logs {
		f.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// TestSlurmPreemptRequeue runs a real Slurm: a long low-priority job whose
// C client uses a remote GPU through deploy/slurm/gpuctl-job, then a
// high-priority job that needs the node. Slurm preempts and requeues the
// low job; gpuctl job preempts its session into an image and dumps the
// client with CRIU; the high job runs; the requeued job restores the
// client and resumes the session. Then SIGUSR1 (what --signal=B:USR1@N
// sends before a time limit) has gpuctl job checkpoint the restored client
// again and requeue its own job, which finishes with output bit-identical
// to a run that was never preempted.
func TestSlurmPreemptRequeue(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	c := harness.New(t)
	requireSlurm(t, c.Build.Root)
	w := &world{t: t, c: c}
	w.a = c.NewHost("a", harness.HostOptions{Args: []string{"--grace", "5s"}})
	w.client = c.NewNode("slurm")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	w.requireRoutes(w.a)

	// The reference, never preempted, while Slurm comes up.
	const mib, steps, sleepMS = 1, 40, 150
	ref := make(chan harness.Result, 1)
	go func() {
		ref <- w.client.RunClient(w.a, 3*time.Minute, w.env, w.stateful, fmt.Sprint(mib), fmt.Sprint(steps), fmt.Sprint(sleepMS))
	}()

	jobDir := t.TempDir()
	sl := startSlurm(t, w.client, append(append([]string{}, w.env...),
		"GPUCTL="+c.Build.Gpuctl, "GPUCTL_SERVER="+w.a.Listen(), "GPUCTL_HOST="+w.a.API(),
		"GPUCTL_TOKEN_FILE="+w.a.TokenFile, "GPUCTL_JOB_DIR="+jobDir))
	want := <-ref
	if want.Code != 0 || !strings.Contains(want.Stdout, "RESULT ") {
		t.Fatalf("reference run: exit %d\n%s%s", want.Code, want.Stdout, want.Stderr)
	}
	w.waitNoSessions(w.a, 15*time.Second)

	script := filepath.Join(c.Build.Root, "deploy/slurm/gpuctl-job")
	low := sl.must("sbatch", "--parsable", "-p", "low", "-J", "low", "-o", "low.out", "-e", "low.err",
		script, w.stateful, fmt.Sprint(mib), fmt.Sprint(steps), fmt.Sprint(sleepMS))
	sel := "slurm_job=" + low
	s := w.waitState(w.a, sel, "running", 30*time.Second)
	// Let it get some way, then bring in the job that needs the node.
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(sl.read("low.out"), "\nstep ") < 4 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	high := sl.must("sbatch", "--parsable", "-p", "high", "-J", "high", "-o", "high.out", "-e", "high.err",
		"--wrap", fmt.Sprintf("exec %s run -- %s 1 2 0", c.Build.Gpuctl, w.stateful))

	// Slurm requeues the low job; gpuctl job leaves its session preempted
	// in an image (not ended) and the program in a checkpoint.
	p := w.waitState(w.a, sel, "preempted", 60*time.Second)
	if p.ID != s.ID || p.Image == "" {
		t.Fatalf("low job's session after preemption: %+v, want %s waiting in an image", p, s.ID)
	}
	hj := sl.waitJob(high, 60*time.Second, "COMPLETED", "FAILED")
	if hj["ExitCode"] != "0:0" || !strings.Contains(sl.read("high.out"), "RESULT ") {
		t.Fatalf("high job: %s exit %s\n%s%s", hj["JobState"], hj["ExitCode"], sl.read("high.out"), sl.read("high.err"))
	}
	if _, err := os.Stat(filepath.Join(jobDir, low, "checkpoint.json")); err != nil {
		t.Errorf("no checkpoint of the low job in %s: %v", jobDir, err)
	}
	lj := sl.job(low)
	if lj["JobState"] != "PENDING" || lj["Restarts"] != "1" {
		t.Fatalf("low job after preemption: %s (reason %s), restarts %s; want PENDING, requeued once", lj["JobState"], lj["Reason"], lj["Restarts"])
	}
	// Slurm holds a requeued job for two minutes; an administrator (or
	// this test) lets it start sooner.
	sl.release(low)

	// Restored, it runs on; then SIGUSR1, as sbatch --signal=B:USR1@N
	// sends before a time limit: gpuctl job checkpoints the restored
	// program again and requeues its own job.
	w.waitState(w.a, sel, "running", 60*time.Second)
	done := strings.Count(sl.read("low.out"), "\nstep ")
	deadline = time.Now().Add(30 * time.Second)
	for strings.Count(sl.read("low.out"), "\nstep ") < done+3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	sl.must("scancel", "--signal=USR1", "--batch", low)
	if p := w.waitState(w.a, sel, "preempted", 30*time.Second); p.ID != s.ID {
		t.Fatalf("after SIGUSR1 the low job's session is %+v", p)
	}
	lj = sl.waitJob(low, 30*time.Second, "PENDING")
	if lj["Restarts"] != "2" {
		t.Fatalf("low job after SIGUSR1: restarts %s, want 2 (requeued by gpuctl job)", lj["Restarts"])
	}
	sl.release(low)

	lj = sl.waitJob(low, 90*time.Second, "COMPLETED", "FAILED")
	out, errOut := sl.read("low.out"), sl.read("low.err")
	if lj["ExitCode"] != "0:0" || lj["Restarts"] != "2" {
		t.Fatalf("requeued low job: %s exit %s restarts %s\n%s", lj["JobState"], lj["ExitCode"], lj["Restarts"], errOut)
	}
	if out != want.Stdout {
		t.Errorf("preempted and requeued job's output differs from a run never preempted\n--- job\n%s--- reference\n%s", out, want.Stdout)
	}
	for _, line := range []string{"terminated: checkpointing", "user defined signal 1: checkpointing", "requeued",
		"preempted session " + s.ID, "checkpointed ", "restored ", "resumed session " + s.ID} {
		if !strings.Contains(errOut, line) {
			t.Errorf("gpuctl job's messages lack %q:\n%s", line, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(jobDir, low)); !os.IsNotExist(err) {
		t.Errorf("the finished job's directory is still there: %v", err)
	}
	w.waitNoSessions(w.a, 45*time.Second)
}
