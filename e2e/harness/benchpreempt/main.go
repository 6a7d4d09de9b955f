// Command benchpreempt measures preemption on one machine (make
// bench-preempt; e2e/gpu/bench-preempt.sh on a GPU host):
//
//   - memory: a session of priority 0 holds MIB of device memory; a session
//     of priority 10 then allocates MIB that do not fit beside it. gpud
//     preempts the first. Printed: how long the second waited for its
//     memory, against the first's checkpoint stall (gpud's
//     gpud_preemption_stall_seconds) and the same checkpoint taken by hand;
//     then how long the first took to come back once the second let go.
//   - round trip: a labelled session holding MIB is preempted by selector
//     on host A and resumed on host B (gpuctl preempt, gpuctl resume --on);
//     printed: each command's time and when the client answered again.
//
// Both gpuds run on loopback; the client is e2e/cprogs/memhold, driven over
// its stdin.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness/benchgpud"
)

func main() {
	root := flag.String("root", ".", "the repository (build/ under it)")
	prog := flag.String("memhold", "", "the memhold client binary")
	backend := flag.String("backend", "emulated", "gpud's backend: emulated or cuda")
	mib := flag.Int("mib", 256, "MiB the low-priority session holds")
	flag.Parse()
	if err := run(*root, *prog, *backend, *mib); err != nil {
		fmt.Fprintln(os.Stderr, "benchpreempt:", err)
		os.Exit(1)
	}
}

// tokenFile is the token both gpuds share.
var tokenFile string

// client is one memhold under gpuctl run.
type client struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startClient(root, prog string, g *benchgpud.Gpud, prio int, label string) (*client, error) {
	cmd := exec.Command(filepath.Join(root, "build/bin/gpuctl"), "run", "--server", g.Listen, "--token-file", tokenFile,
		"--priority", strconv.Itoa(prio), "--label", label, "--", prog)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &client{cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

// do sends one command and waits for its answer, which must end in "ok"
// (or be "info ..." or "bye").
func (c *client) do(line string) (string, time.Duration, error) {
	t0 := time.Now()
	if _, err := fmt.Fprintln(c.in, line); err != nil {
		return "", 0, err
	}
	ans, err := c.out.ReadString('\n')
	d := time.Since(t0)
	ans = strings.TrimSpace(ans)
	if err != nil {
		return ans, d, fmt.Errorf("%q: %w", line, err)
	}
	if !strings.HasSuffix(ans, " ok") && !strings.HasPrefix(ans, "info ") && ans != "bye" {
		return ans, d, fmt.Errorf("%q answered %q", line, ans)
	}
	return ans, d, nil
}

func (c *client) quit() {
	_, _, _ = c.do("quit")
	_ = c.in.Close()
	_ = c.cmd.Wait()
}

func gpuctl(root string, g *benchgpud.Gpud, v any, args ...string) (time.Duration, error) {
	t0 := time.Now()
	cmd := exec.Command(filepath.Join(root, "build/bin/gpuctl"), append([]string{"--host", g.API, "--token-file", tokenFile}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("gpuctl %s: %w", strings.Join(args, " "), err)
	}
	if v != nil {
		return d, json.Unmarshal(out, v)
	}
	return d, nil
}

// metric reads one sample of gpud's /metrics.
func metric(g *benchgpud.Gpud, name string) float64 {
	resp, err := http.Get("http://" + g.API + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000) }

func run(root, prog, backend string, mib int) error {
	if prog == "" {
		return fmt.Errorf("pass -memhold, the memhold client binary")
	}
	size := uint64(mib) << 20
	// Room for one session's MiB and not two (plus slack for small
	// allocations).
	room := strconv.FormatUint(size+size/2, 10)
	// Both hosts share a token, as hosts that move sessions between
	// them do.
	dir, err := os.MkdirTemp("", "bench-preempt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(fmt.Sprintf("bench-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		return err
	}
	extra := []string{"--backend", backend, "--grace", "1s", "--preempt-mem", room, "--token-file", tokenFile}
	if backend == "emulated" {
		extra = append(extra, "--emulated-mem", strconv.FormatUint(2*size, 10))
	}
	a, err := benchgpud.Start(filepath.Join(root, "build"), "bench-preempt-a", extra...)
	if err != nil {
		return err
	}
	defer a.Stop()
	b, err := benchgpud.Start(filepath.Join(root, "build"), "bench-preempt-b", extra...)
	if err != nil {
		return err
	}
	defer b.Stop()

	// The same checkpoint by hand, as the baseline of the stall.
	base, err := startClient(root, prog, a, 0, "bench=base")
	if err != nil {
		return err
	}
	if _, _, err := base.do(fmt.Sprintf("alloc x %d", mib)); err != nil {
		return err
	}
	if _, _, err := base.do("check x"); err != nil {
		return err
	}
	var ck struct {
		DurationMS int64 `json:"duration_ms"`
	}
	var sess []struct {
		ID string `json:"id"`
	}
	if _, err := gpuctl(root, a, &sess, "sessions", "--selector", "bench=base", "--json"); err != nil || len(sess) != 1 {
		return fmt.Errorf("the baseline session: %v %v", sess, err)
	}
	if _, err := gpuctl(root, a, &ck, "checkpoint", sess[0].ID, "--leave-running", "--json"); err != nil {
		return err
	}
	base.quit()
	time.Sleep(1500 * time.Millisecond) // its session ends at its exit (after --grace had it been killed)

	low, err := startClient(root, prog, a, 0, "bench=low")
	if err != nil {
		return err
	}
	defer low.quit()
	if _, _, err := low.do(fmt.Sprintf("alloc a %d", mib)); err != nil {
		return err
	}
	if _, _, err := low.do("check a"); err != nil {
		return err
	}
	high, err := startClient(root, prog, a, 10, "bench=high")
	if err != nil {
		return err
	}
	if _, _, err := high.do("info"); err != nil { // connected and ready
		return err
	}
	_, wait, err := high.do(fmt.Sprintf("alloc b %d", mib))
	if err != nil {
		return err
	}
	stall := time.Duration(metric(a, "gpud_preemption_stall_seconds_sum") * float64(time.Second))
	t0 := time.Now()
	high.quit()
	if _, _, err := low.do("check a"); err != nil {
		return err
	}
	back := time.Since(t0)

	rt, err := startClient(root, prog, a, 0, "bench=rt")
	if err != nil {
		return err
	}
	defer rt.quit()
	// The low session is back on A and holds its memory: give A room
	// for this one by ending it first.
	low.quit()
	time.Sleep(1500 * time.Millisecond)
	if _, _, err := rt.do(fmt.Sprintf("alloc r %d", mib)); err != nil {
		return err
	}
	var pre []struct {
		StallMS int64 `json:"stall_ms"`
	}
	dp, err := gpuctl(root, a, &pre, "preempt", "--selector", "bench=rt", "--json")
	if err != nil || len(pre) != 1 {
		return fmt.Errorf("preempt: %v %v", pre, err)
	}
	var res []struct {
		DurationMS int64 `json:"duration_ms"`
	}
	dr, err := gpuctl(root, a, &res, "resume", "--selector", "bench=rt", "--on", b.API, "--json")
	if err != nil || len(res) != 1 {
		return fmt.Errorf("resume: %v %v", res, err)
	}
	t1 := time.Now()
	if _, _, err := rt.do("check r"); err != nil {
		return err
	}
	answered := time.Since(t1)

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "preemption on the %s device, %d MiB held by the low-priority session\t\n", backend, mib)
	fmt.Fprintf(tw, "high-priority allocation waited (preempting the low session)\t%s\t\n", ms(wait))
	fmt.Fprintf(tw, "  the low session's checkpoint stall (gpud_preemption_stall_seconds)\t%s\t\n", ms(stall))
	fmt.Fprintf(tw, "  the same checkpoint by hand (gpuctl checkpoint --leave-running)\t%d ms\t\n", ck.DurationMS)
	fmt.Fprintf(tw, "  wait / stall\t%.2f\t\n", float64(wait)/float64(max(stall, 1)))
	fmt.Fprintf(tw, "low session answered again after the high one quit\t%s\t\n", ms(back))
	fmt.Fprintf(tw, "round trip A -> B of a labelled session (%d MiB)\t\t\n", mib)
	fmt.Fprintf(tw, "  gpuctl preempt --selector (stall %d ms)\t%s\t\n", pre[0].StallMS, ms(dp))
	fmt.Fprintf(tw, "  gpuctl resume --selector --on B (restore %d ms)\t%s\t\n", res[0].DurationMS, ms(dr))
	fmt.Fprintf(tw, "  client's next call answered by B\t%s\t\n", ms(answered))
	fmt.Fprintf(tw, "  preempt to client running on B\t%s\t\n", ms(dp+dr+answered))
	return tw.Flush()
}
