// Package session is gpud's table of client sessions: their states and
// the transitions between them (a table in state.go, and every transition
// it refuses is an errs.FailedPrecondition error), the Manager that owns
// each session's worker process and gpud's copy of its client's socket,
// and the records that outlive a gpud restart.
//
// The client listener (package remoting/server) hands the Manager each
// connection that passed the handshake: Create for a new session, Resume
// for a client coming back. The checkpoint, restore and migration
// pipelines move sessions through their states with the Manager's
// checkpoint.Sessions, checkpoint.Reattacher and restore.Adopter methods
// (pipeline.go). gpud holds its own copy of every attached client's
// socket, so that a quiesced session's client only stalls and a worker can
// be given the socket back.
//
// Every session has an owner: the tenant (package tenant) whose token
// created it, or whose image it was restored from; empty for the
// administrator. Create and Adopt hold each tenant to its limits
// (tenancy.go): max_sessions there, and max_mem_bytes through the Manager
// being the ledger of gpud's quota service, which metered workers ask
// before they hold more device memory.
//
// A Record persists as JSON in Records, one value per session id; gpud
// keeps them in the sessions bucket of its host store. On start, records
// of sessions whose worker died with the previous gpud are dropped, and
// stopped sessions (in an image) are listed again until their retention
// ends.
package session
