package session

// Fence ends a session's worker here and forgets the session: the cluster
// registry says another host owns it, and only the owner may serve it.
func (m *Manager) Fence(id, why string) { m.end(id, why) }
