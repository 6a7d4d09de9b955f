package api

import "time"

// GPU is one physical device, as a host reports it.
type GPU struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	MemoryBytes uint64 `json:"memory_bytes"`
	PCIBusID    string `json:"pci_bus_id,omitempty"`
}

// HostInfo is what a host's backend reports about its devices.
type HostInfo struct {
	Backend       string `json:"backend"` // "cuda" or "emulated"
	DriverVersion string `json:"driver_version"`
	GPUs          []GPU  `json:"gpus"`
}

// Host is the reply to GET /v1/host.
type Host struct {
	Name string `json:"name"` // gpud --name
	HostInfo
	// Listen is where clients connect (gpud --listen). A wildcard
	// address is reported as the address the request reached, which the
	// caller can route to.
	Listen    string    `json:"listen"`
	API       string    `json:"api"` // gpud --api
	Version   string    `json:"version"`
	GoVersion string    `json:"go_version"`
	Started   time.Time `json:"started"`
	Sessions  int       `json:"sessions"`
	// SocketNS names the host's namespace of abstract unix socket names
	// (machine and network namespace); a migration between two gpuds that
	// report the same one hands the worker over.
	SocketNS string `json:"socket_ns"`
	// MemFreeBytes is the served device's memory that no session holds; a
	// migration target with less free than the session holds is refused
	// before the session is touched. Nil when the host does not report it,
	// and to a tenant, whom it would tell about others' sessions.
	MemFreeBytes *uint64 `json:"mem_free_bytes"`
	// Tenants are the host's tenants (gpud --tenants): every one to the
	// administrator, only itself to a tenant. Sessions then counts the
	// caller's own sessions only.
	Tenants []Tenant `json:"tenants,omitempty"`
	// CRIU is the criu binary the host checkpoints with; nil from a gpud
	// that does not report it.
	CRIU *CRIU `json:"criu,omitempty"`
}

// Tenant is one tenant of a host, its limits and what it holds there.
type Tenant struct {
	Name        string `json:"name"`
	MaxMemBytes uint64 `json:"max_mem_bytes,omitempty"` // 0: no limit
	MaxSessions int    `json:"max_sessions,omitempty"`  // 0: no limit
	Sessions    int    `json:"sessions"`                // live sessions on the host
	// MemBytes is the device memory its sessions' allocations hold: what
	// counts against MaxMemBytes.
	MemBytes uint64 `json:"mem_bytes"`
	// TokenFingerprint identifies the tenant's token to those who hold
	// the host token (an HMAC keyed with it): hosts that migrate the
	// tenant's sessions to each other must report the same. Only the
	// administrator is told.
	TokenFingerprint string `json:"token_fingerprint,omitempty"`
}

// CRIU is the criu binary a gpud found at startup and where it found it.
type CRIU struct {
	Path string `json:"path,omitempty"`
	// Source is where it was found, the first of: "flag" (gpud --criu),
	// "GPUCTL_CRIU", "bundle" (criu/criu beside gpud), "build tree" (the
	// .deps/criu/criu of the checkout whose build/bin holds gpud), "PATH".
	Source  string `json:"source,omitempty"`
	Version string `json:"version,omitempty"`
	// Error says why checkpoints are unavailable (no criu, or one that
	// does not run); empty when CRIU is usable.
	Error string `json:"error,omitempty"`
}
