package worker

import (
	"os/exec"
	"runtime"
)

// Spawner starts worker processes from one OS thread that lives as long
// as gpud.
//
// Workers are started with PDEATHSIG so that none outlives gpud, and Go
// documents that signal as sent when the *thread* that forked the child
// ends (go.dev/issue/27505), which Go does when a goroutine that locked
// its thread returns without unlocking it (cgo code may). Forking every
// worker from a thread that is locked and never released keeps a worker's
// life tied to gpud's alone, whatever the kernel does on thread exit.
type Spawner struct {
	work chan func()
}

// NewSpawner starts the spawning thread. It is never stopped: it must
// outlive every worker it starts.
func NewSpawner() *Spawner {
	s := &Spawner{work: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked, never returns
		for f := range s.work {
			f()
		}
	}()
	return s
}

// start runs cmd.Start on the spawning thread.
func (s *Spawner) start(cmd *exec.Cmd) error {
	if s == nil {
		return cmd.Start()
	}
	errc := make(chan error, 1)
	s.work <- func() { errc <- cmd.Start() }
	return <-errc
}
