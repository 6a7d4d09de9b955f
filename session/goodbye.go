package session

import (
	"github.com/gpuctl/gpuctl/remoting/worker"
)

// A client whose program exits normally says goodbye (wire.OpGoodbye) on
// its connection; the worker executes what came before it and reports it
// (worker.Event.Goodbye). Such a session has nobody left to wait for, so
// it ends at once: its worker is stopped, its device memory freed and it
// leaves the table, where a lost connection would keep it detached for
// the grace period. A program killed or cut off says nothing and keeps
// that behaviour: it may be checkpointed, or come back.

// clientExited acts on the goodbye worker h reported for session id,
// served under epoch. Only the session's current worker at the session's
// epoch is heard: a connection reaches a worker only after its Hello
// proved the session's secret and its owner's token, so the goodbye is
// the owner's; a worker that is not the session's current copy (another
// epoch) is a stale one, and its client's going is an ordinary
// disconnect.
func (m *Manager) clientExited(id string, h *worker.Handle, epoch uint64) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok || s.worker != h {
		m.mu.Unlock()
		return
	}
	if epoch != s.rec.Epoch {
		m.log.Warn("goodbye from a worker at another epoch than its session's; taken as a disconnect", "session", id,
			"worker_epoch", epoch, "epoch", s.rec.Epoch)
		m.mu.Unlock()
		m.clientGone(id, h, "goodbye at a stale epoch")
		return
	}
	switch s.rec.State {
	case Running, Detached:
		m.log.Info("client exited; ending its session", "session", id, "tenant", s.rec.Tenant)
		m.mu.Unlock()
		m.end(id, "client exited")
		return
	case Quiescing, Checkpointing, Migrating:
		// The pipeline that holds the session decides its next state:
		// a checkpoint that leaves it running, or a step that fails,
		// brings it back here (Resumed), where it ends; a migration
		// that succeeds or a release leaves it in its image, as after
		// any other disconnect.
		m.log.Info("client exited during a checkpoint or migration; the session ends when that step finishes", "session", id,
			"state", s.rec.State, "tenant", s.rec.Tenant)
		s.exited = true
		m.closeConn(s)
	}
	m.mu.Unlock()
}

// endExited ends a session whose client exited while a pipeline held it,
// once it runs here again.
func (m *Manager) endExited(id string) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	live := ok && s.exited && (s.rec.State == Running || s.rec.State == Detached)
	m.mu.Unlock()
	if !live {
		return
	}
	m.log.Info("client exited; ending its session now that it runs again", "session", id)
	m.end(id, "client exited")
}
