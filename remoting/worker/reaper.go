package worker

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Reaper collects the exit status of processes gpud inherits as child
// subreaper (workers restored by CRIU are reparented to gpud) and that no
// exec.Cmd waits for.
//
// It must not steal the exit of a child some package started with
// os/exec, whose Wait would then fail. So it reaps only processes adopted
// with Adopt, plus zombies that have stayed unreaped for zombieGrace:
// an orphan nobody will ever wait for.
type Reaper struct {
	log *slog.Logger

	mu      sync.Mutex
	adopted map[int]chan struct{}
	zombies map[int]time.Time // first time a child was seen as a zombie
}

// zombieGrace is how long an unclaimed zombie child is left for its
// owner's Wait before the reaper collects it.
const zombieGrace = 30 * time.Second

// NewReaper returns a reaper; call Run to start it.
func NewReaper(log *slog.Logger) *Reaper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reaper{log: log, adopted: map[int]chan struct{}{}, zombies: map[int]time.Time{}}
}

// SetSubreaper makes the calling process the child subreaper of its
// descendants.
func SetSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// Adopt registers pid, which gpud did not start with os/exec; the channel
// is closed once it has exited and been reaped.
func (r *Reaper) Adopt(pid int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.adopted[pid]
	if !ok {
		ch = make(chan struct{})
		r.adopted[pid] = ch
	}
	go r.sweep() // it may have died already
	return ch
}

// Run reaps on every SIGCHLD, and every few seconds regardless, until ctx
// ends.
func (r *Reaper) Run(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGCHLD)
	defer signal.Stop(sig)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-tick.C:
		}
		r.sweep()
	}
}

func (r *Reaper) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid, ch := range r.adopted {
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		if got == pid || err == unix.ECHILD {
			r.log.Info("adopted process exited", "pid", pid, "status", ws.ExitStatus())
			close(ch)
			delete(r.adopted, pid)
		}
	}
	now := time.Now()
	seen := map[int]bool{}
	for _, pid := range children() {
		if _, ok := r.adopted[pid]; ok || !isZombie(pid) {
			continue
		}
		seen[pid] = true
		first, ok := r.zombies[pid]
		if !ok {
			r.zombies[pid] = now
			continue
		}
		if now.Sub(first) >= zombieGrace {
			var ws unix.WaitStatus
			if got, _ := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid {
				r.log.Info("reaped an orphaned process", "pid", pid, "status", ws.ExitStatus())
			}
		}
	}
	for pid := range r.zombies {
		if !seen[pid] {
			delete(r.zombies, pid)
		}
	}
}

// children lists this process's children from every thread's
// /proc/self/task/TID/children.
func children() []int {
	dirs, _ := filepath.Glob("/proc/self/task/*/children")
	var out []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// isZombie reads the state field of /proc/PID/stat.
func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The command name is in parentheses and may contain spaces.
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

// gone reports whether pid no longer runs: it does not exist or is a
// zombie awaiting its reaper.
func gone(pid int) bool {
	return unix.Kill(pid, 0) != nil || isZombie(pid)
}
