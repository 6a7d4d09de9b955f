package api

import "time"

// Session is one entry of GET /v1/sessions and the reply to
// GET /v1/sessions/{id}.
type Session struct {
	ID string `json:"id"` // "s-" and 12 hex digits
	// State is running, detached, quiescing, checkpointing, migrating or
	// stopped; package session holds the machine that moves between them.
	State     string    `json:"state"`
	Host      string    `json:"host"`             // gpud --name
	Client    string    `json:"client,omitempty"` // the attached client's address
	Created   time.Time `json:"created"`
	MemBytes  uint64    `json:"mem_bytes"` // device memory the session holds
	Device    string    `json:"device"`
	Backend   string    `json:"backend"`
	WorkerPID int       `json:"worker_pid,omitempty"`
	// Tenant owns the session (gpud --tenants); absent for the
	// administrator's.
	Tenant string `json:"tenant,omitempty"`
	// Epoch is the session's epoch on this host: it grows at every
	// checkpoint that leaves the session running, restore and migration,
	// and only the worker handed the current one may serve.
	Epoch uint64 `json:"epoch,omitempty"`
	// Priority decides which sessions give way under device-memory
	// pressure: higher wins, 0 by default.
	Priority int32 `json:"priority"`
	// Labels are the session's KEY=VALUE pairs (gpuctl run --label);
	// an empty object when it has none.
	Labels Labels `json:"labels"`
	// Image is the image a preempted session waits in.
	Image string `json:"image,omitempty"`
}

// CheckpointRequest is the body of POST /v1/sessions/{id}/checkpoint; an
// empty body is the zero value.
type CheckpointRequest struct {
	// LeaveRunning keeps the session running here after the image is
	// stored; otherwise its worker is released and the session lives in
	// the image.
	LeaveRunning bool `json:"leave_running"`
}

// CheckpointReply is the reply to POST /v1/sessions/{id}/checkpoint.
type CheckpointReply struct {
	Image       string       `json:"image"`
	Session     string       `json:"session"`
	Bytes       int64        `json:"bytes"`        // the image's logical size
	StoredBytes int64        `json:"stored_bytes"` // new bytes the checkpoint added to the store
	DurationMS  int64        `json:"duration_ms"`
	Steps       []StepTiming `json:"steps,omitempty"`
	// Nonce names the abstract socket a restored worker dials
	// (@gpuctl-attach-<nonce>).
	Nonce string `json:"nonce"`
	// StallMS is how long the client was paused: with leave_running, the
	// session runs again once its device memory is in host memory, and
	// the image is made durable after that (DurationMS).
	StallMS int64 `json:"stall_ms"`
	// MemBytes and MemSentBytes: the session's device memory, and how
	// much of it was copied (the blocks changed since its last image).
	MemBytes     int64 `json:"mem_bytes,omitempty"`
	MemSentBytes int64 `json:"mem_sent_bytes,omitempty"`
	// MemCopiedBytes is what the save copied from the device: less than
	// MemBytes when gpud kept the session's last save in host memory and
	// only the changed blocks had to come across.
	MemCopiedBytes int64 `json:"mem_copied_bytes,omitempty"`
	// ProcessOf is set when the checkpoint reused the dump of the worker
	// that this earlier image holds, because the worker changed nothing
	// but its device memory since: neither the driver's checkpoint nor
	// CRIU ran, and the image shares that dump's chunks.
	ProcessOf string `json:"process_of,omitempty"`
}

// StepTiming is how long one step of a checkpoint, restore or migration
// took.
type StepTiming struct {
	Step     string        `json:"step"`
	Duration time.Duration `json:"duration_ns"`
}

// AdoptRequest is the body of POST /v1/chunks/staged/{id}/adopt: the
// checkpoint whose prepared restore the target takes over (its attach
// nonce) and the save its staged device memory must be (its generation,
// as a decimal string: JSON numbers lose 64-bit values).
type AdoptRequest struct {
	Nonce string `json:"nonce"`
	Gen   uint64 `json:"gen,string"`
	// Image, sent again once the session runs on the target, is that
	// checkpoint's image, pushed there since: the target makes it the
	// session's parent and its save the base of the next checkpoint
	// (Gen is not needed then: the image's table is checked against the
	// save the session was adopted from).
	Image string `json:"image,omitempty"`
	// State, for a restore prepared ahead of the freeze from the
	// session's last image, is the protocol state of the freeze, which
	// reused that image's dump, and Epoch the freeze's epoch: the
	// target copies in the blocks the freeze changed and puts the state
	// into the prepared worker before it adopts it.
	State []byte `json:"state,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
}

// MaxAdoptBody bounds POST /v1/chunks/staged/{id}/adopt: a protocol
// state of up to 64 MiB, in base64.
const MaxAdoptBody = 96 << 20

// RestoreReply is the reply to POST /v1/images/{id}/restore, which takes
// no body.
type RestoreReply struct {
	Session string `json:"session"`
	Image   string `json:"image"`
	PID     int    `json:"pid"` // the restored worker's host PID
	// Listen is the restoring host's --listen address, where the
	// session's client is to reconnect.
	Listen     string `json:"listen"`
	DurationMS int64  `json:"duration_ms"`
	// Steps are the restore's steps, and "memread": reading the saved
	// device memory, which runs beside criu.
	Steps []StepTiming `json:"steps,omitempty"`
}

// MigrateRequest is the body of POST /v1/sessions/{id}/migrate.
type MigrateRequest struct {
	To string `json:"to"` // the target gpud's --api HOST:PORT
}

// MigrateReply is the reply to POST /v1/sessions/{id}/migrate.
type MigrateReply struct {
	Session    string `json:"session"`
	To         string `json:"to"`
	Listen     string `json:"listen"` // where the client was sent
	Image      string `json:"image"`
	Bytes      int64  `json:"bytes"`      // the image's logical size
	SentBytes  int64  `json:"sent_bytes"` // what crossed the network
	SentChunks int    `json:"sent_chunks"`
	// StreamedBytes are the process image's chunks sent to the target
	// while the freeze stored them; PushBytes what the push after the
	// freeze carried (the manifest, and the chunks neither the rounds
	// nor the stream delivered). Both are part of SentBytes.
	StreamedBytes int64        `json:"streamed_bytes"`
	PushBytes     int64        `json:"push_bytes"`
	DowntimeMS    int64        `json:"downtime_ms"` // the client's stall
	DurationMS    int64        `json:"duration_ms"`
	Steps         []StepTiming `json:"steps"`
	// Rounds are the pre-copy rounds: device memory sent while the
	// session ran, before the freeze.
	Rounds []PrecopyRound `json:"rounds,omitempty"`
	// TargetSteps are the target's restore steps (RestoreReply.Steps).
	TargetSteps []StepTiming `json:"target_steps,omitempty"`
	// FreezeSteps are the steps of the freeze's checkpoint (quiesce,
	// save, dump, store, ...).
	FreezeSteps []StepTiming `json:"freeze_steps,omitempty"`
	// Memory says the pre-copy staged the session's device memory in
	// the target's memory only, not in either store: the target took the
	// session over from its staging, and the image (Image) was stored
	// here and sent there after the client ran on the target, outside
	// the downtime. ImageError says why there is no image when that
	// failed: the session runs on the target all the same.
	Memory     bool   `json:"memory,omitempty"`
	ImageError string `json:"image_error,omitempty"`
	// Ahead names the session's last image when the target restored
	// the session from that image's dump while it still ran here, and
	// the freeze reused the dump: the freeze then handed over only the
	// changed device memory and the protocol state, and the target's
	// restore was done before the client paused. AheadError says why
	// the target did not restore the session ahead when it was tried.
	Ahead      string `json:"ahead,omitempty"`
	AheadError string `json:"ahead_error,omitempty"`
}

// PrecopyRound is one pass of a live migration's pre-copy.
type PrecopyRound struct {
	Blocks     int   `json:"blocks"`      // blocks changed since the previous round (all, in the first)
	Bytes      int64 `json:"bytes"`       // their bytes
	SentBytes  int64 `json:"sent_bytes"`  // what crossed the network (compressed, and only what the target lacked)
	DurationMS int64 `json:"duration_ms"` // the round, the client's pause to copy included
	PauseMS    int64 `json:"pause_ms"`    // the client's pause while the changed blocks were copied to host memory
	// Where the round's time went: the worker finding and copying the
	// changed blocks to host memory, this host storing them, and sending
	// the target what it lacked.
	CopyMS  int64 `json:"copy_ms"`
	StoreMS int64 `json:"store_ms"`
	SendMS  int64 `json:"send_ms"`
}

// PreemptRequest is the body of POST /v1/sessions/{id}/preempt.
type PreemptRequest struct {
	// DeadlineMS bounds the checkpoint: one that cannot finish in time is
	// rolled back and the session keeps running. 0: no deadline.
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// DropClient closes the client's connection as soon as the session is
	// preempted, instead of holding it for gpud's --grace: the client
	// then retries, answered "preempted", and holds no connection between
	// tries, so that its own process can be checkpointed (gpuctl job).
	DropClient bool `json:"drop_client,omitempty"`
}

// PreemptReply is the reply to POST /v1/sessions/{id}/preempt: the
// session now waits in Image (state preempted).
type PreemptReply struct {
	Session string `json:"session"`
	Image   string `json:"image"`
	Bytes   int64  `json:"bytes"` // the image's logical size
	// StallMS is how long the checkpoint held the client (quiesce to
	// release); the client then waits until the session is resumed.
	StallMS int64 `json:"stall_ms"`
	// MemBytes is the device memory the preemption gave back.
	MemBytes uint64 `json:"mem_bytes"`
}

// ResumeRequest is the body of POST /v1/sessions/{id}/resume.
type ResumeRequest struct {
	// On is the --api HOST:PORT of the gpud to resume on; empty: here.
	On string `json:"on,omitempty"`
}

// ResumeReply is the reply to POST /v1/sessions/{id}/resume.
type ResumeReply struct {
	Session string `json:"session"`
	// Host is the --api address of the gpud the session runs on now.
	Host string `json:"host"`
	// Listen is where its client reconnects (the "moved to" address when
	// it was resumed on another host).
	Listen     string `json:"listen,omitempty"`
	Image      string `json:"image"`
	DurationMS int64  `json:"duration_ms"`
}
