package main

import (
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// spinner shows that a long request is under way, on stderr when it is a
// terminal and the output is not JSON; stop clears it. Nothing is drawn
// for scripts and tests.
func (e *env) spinner(asJSON bool, what string) (stop func()) {
	f, ok := e.stderr.(*os.File)
	if asJSON || !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	bar := progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionThrottle(80*time.Millisecond),
	)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = bar.Add(1)
			}
		}
	}()
	return func() {
		close(done)
		_ = bar.Clear()
	}
}
