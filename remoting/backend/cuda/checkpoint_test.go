package cuda

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// processModel follows the driver's per-process checkpoint state machine
// (running -> locked -> checkpointed -> locked -> running), refuses calls
// out of order as the driver does, and fails the calls a test names. It
// records every call, so a test can assert the exact sequence Checkpointer
// drives.
type processModel struct {
	st    ProcessState
	fail  map[string]cu.Result // call -> result to fail it with
	after map[string]ProcessState
	calls []string
	pairs int
}

func (m *processModel) step(call string, from, to ProcessState) error {
	m.calls = append(m.calls, call)
	if r, ok := m.fail[call]; ok {
		if s, ok := m.after[call]; ok {
			m.st = s
		}
		return r
	}
	if m.st != from {
		return cu.ErrorIllegalState
	}
	m.st = to
	return nil
}

func (m *processModel) lock(_ int, timeoutMs uint32) error {
	if timeoutMs == 0 {
		return cu.ErrorInvalidValue
	}
	return m.step("lock", StateRunning, StateLocked)
}
func (m *processModel) checkpoint(int) error {
	return m.step("checkpoint", StateLocked, StateCheckpointed)
}
func (m *processModel) restore(_ int, from, to [][16]byte) error {
	m.pairs = len(from)
	return m.step("restore", StateCheckpointed, StateLocked)
}
func (m *processModel) unlock(int) error { return m.step("unlock", StateLocked, StateRunning) }
func (m *processModel) state(int) (ProcessState, error) {
	m.calls = append(m.calls, "state")
	return m.st, nil
}

func TestSuspendRollsBack(t *testing.T) {
	tests := []struct {
		name   string
		fail   map[string]cu.Result
		after  map[string]ProcessState
		calls  []string
		final  ProcessState
		errHas string
	}{
		{name: "success", calls: []string{"lock", "checkpoint"}, final: StateCheckpointed},
		{name: "lock times out", fail: map[string]cu.Result{"lock": cu.ErrorTimeout},
			calls: []string{"lock"}, final: StateRunning, errHas: "locking its CUDA calls: CUDA_ERROR_TIMEOUT"},
		{name: "checkpoint fails, still locked", fail: map[string]cu.Result{"checkpoint": cu.ErrorOutOfMemory},
			calls: []string{"lock", "checkpoint", "state", "unlock"}, final: StateRunning, errHas: "checkpointing its GPU state"},
		{name: "checkpoint fails half way", fail: map[string]cu.Result{"checkpoint": cu.ErrorUnknown},
			after: map[string]ProcessState{"checkpoint": StateCheckpointed},
			calls: []string{"lock", "checkpoint", "state", "restore", "unlock"}, final: StateRunning, errHas: "checkpointing"},
		{name: "rollback fails too", fail: map[string]cu.Result{"checkpoint": cu.ErrorUnknown, "unlock": cu.ErrorUnknown},
			calls: []string{"lock", "checkpoint", "state", "unlock"}, final: StateLocked, errHas: "rolling back also failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &processModel{fail: tt.fail, after: tt.after}
			c := &Checkpointer{api: m, log: slog.New(slog.DiscardHandler)}
			err := c.Suspend(context.Background(), 42, time.Second)
			if tt.errHas == "" && err != nil {
				t.Fatal(err)
			}
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.Contains(err.Error(), "process 42") {
					t.Fatalf("err = %v, want one naming process 42 and %q", err, tt.errHas)
				}
				if !errs.IsFailedPrecondition(err) {
					t.Errorf("kind %s, want failed_precondition", errs.KindOf(err))
				}
			}
			if !reflect.DeepEqual(m.calls, tt.calls) {
				t.Errorf("calls %v, want %v", m.calls, tt.calls)
			}
			if m.st != tt.final {
				t.Errorf("process left %s, want %s", m.st, tt.final)
			}
		})
	}
}

func TestResumeFromAnyState(t *testing.T) {
	pairs := []GPUPair{{From: u0, To: u1}, {From: u1, To: u0}}
	tests := []struct {
		name  string
		from  ProcessState
		pairs []GPUPair
		calls []string
		npair int
		err   string
	}{
		{name: "running is left alone", from: StateRunning, calls: []string{"state"}},
		{name: "locked is unlocked", from: StateLocked, calls: []string{"state", "unlock"}},
		{name: "checkpointed in place", from: StateCheckpointed, calls: []string{"state", "restore", "unlock"}},
		{name: "checkpointed onto other GPUs", from: StateCheckpointed, pairs: pairs, calls: []string{"state", "restore", "unlock"}, npair: 2},
		{name: "failed", from: StateFailed, calls: []string{"state"}, err: "cannot be resumed"},
		{name: "bad UUID", from: StateCheckpointed, pairs: []GPUPair{{From: "GPU-1", To: u0}}, calls: []string{"state"}, err: "not of the form"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &processModel{st: tt.from}
			c := &Checkpointer{api: m, log: slog.New(slog.DiscardHandler)}
			err := c.Resume(context.Background(), 7, tt.pairs)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if m.st != StateRunning {
				t.Fatalf("process left %s", m.st)
			}
			if !reflect.DeepEqual(m.calls, tt.calls) || m.pairs != tt.npair {
				t.Errorf("calls %v with %d pairs, want %v with %d", m.calls, m.pairs, tt.calls, tt.npair)
			}
		})
	}
}

func TestCheckpointerHonoursContext(t *testing.T) {
	m := &processModel{}
	c := &Checkpointer{api: m, log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Suspend(ctx, 1, time.Second); err == nil || !errs.IsUnavailable(err) {
		t.Fatalf("Suspend on a cancelled context: %v", err)
	}
	if len(m.calls) != 0 {
		t.Fatalf("driver called on a cancelled context: %v", m.calls)
	}
	// A zero timeout takes the default rather than the driver's "wait
	// forever" (which the model refuses).
	if err := c.Lock(context.Background(), 1, 0); err != nil {
		t.Fatal(err)
	}
}
