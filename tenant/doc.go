// Package tenant is who acts on a gpud: the administrator, who holds the
// host token (gpud --token-file) and sees everything, or one of the
// tenants that gpud --tenants FILE names, each with a token of its own and
// optional limits on device memory and live sessions.
//
// The tenants file is a JSON array of
//
//	{"name": "alice", "token_file": "/etc/gpud/alice.token", "max_mem_bytes": 8589934592, "max_sessions": 4}
//
// (the limits are optional; 0 or absent means no limit). Parse reads and
// checks it; Load also reads every token file, refusing one that group or
// others can read, and returns the Set that authenticates tokens.
//
// A Principal is carried in a context: the control API's authentication
// puts the caller there (Set.Authenticate), and so does the client
// listener for a handshake. Packages that own sessions and images read it
// back with FromContext and answer a tenant about its own things only. A
// context without a principal is gpud's own work, which acts as the
// administrator.
package tenant
