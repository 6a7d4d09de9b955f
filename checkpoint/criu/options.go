package criu

import (
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
)

// Options are the CRIU settings of one dump or restore, as plain data. The
// zero value suits a gpuctl worker: the init of its own PID and mount
// namespaces (a private /proc, which the NVIDIA driver needs inside a PID
// namespace), sharing the host's network, UTS and IPC namespaces, holding
// no sockets and no changing files.
type Options struct {
	// Binary is the criu executable. Empty means criubin.Find("").
	Binary string
	// LogDir receives CRIU's log (dump.log, pre-dump.log or restore.log).
	// Empty means the image directory itself.
	LogDir string
	// LogLevel is CRIU's verbosity, 0 to 4. Zero means 4: the log is only
	// read when something failed, and then every line helps.
	LogLevel int
	// Timeout bounds how long CRIU may take to freeze the tasks (CRIU's
	// own --timeout, whole seconds). Zero leaves CRIU's default.
	Timeout time.Duration
	// Stall ends a dump whose log and image files have not grown for
	// this long (criubin.Watch). Zero means criubin.DefaultStall.
	Stall time.Duration
	// Stray, when set, names the tasks a restore that stalled may have
	// put back by then: children of this process that appeared during the
	// restore and whose command line Stray accepts are killed and reaped
	// (a restore's root task is this process's child). Nil leaves them.
	Stray func(args []string) bool

	// LeaveRunning keeps the dumped tasks running after a dump instead of
	// killing them, so a failure later in a pipeline can resume them.
	LeaveRunning bool
	// LeaveStopped leaves the tasks stopped after a dump or a restore.
	LeaveStopped bool
	// ParentImage is the directory of a previous pre-dump, relative to the
	// image directory; only pages changed since are written.
	ParentImage string
	// TrackMemory turns on the kernel's soft-dirty tracking so that a later
	// dump with ParentImage can skip unchanged pages.
	TrackMemory bool

	// ShellJob allows tasks whose session or process group lie outside the
	// dumped tree (a worker that did not call setsid).
	ShellJob bool
	// TCPEstablished dumps established TCP connections. Workers hold none
	// at dump time; leave it off so a stray socket fails loudly.
	TCPEstablished bool
	// ExtUnixSockets allows unix sockets whose peer is outside the tree.
	ExtUnixSockets bool
	// FileLocks dumps file locks.
	FileLocks bool
	// External names resources outside the dumped tree, in CRIU's
	// --external syntax, e.g. "mnt[/dev/nvidia0]:nvidia0".
	External []string
	// GhostLimit is the largest deleted-but-open file CRIU copies into the
	// image, in bytes. Zero means 64 MiB: enough to carry a worker's own
	// executable when gpud was upgraded (its binary replaced) while the
	// worker ran, so such sessions still checkpoint and restore.
	GhostLimit uint32
	// EvasiveDevices lets CRIU reopen device files by path when their
	// device numbers differ on restore.
	EvasiveDevices bool
	// HostMounts is false for a worker: its mount namespace is a copy of
	// the host's plus its own /proc. CRIU then treats every mount it did
	// not create as external (--ext-mount-map auto, with external sharing
	// and masters) and restores the namespace on top of the host's root
	// (--root /). Set it for a task that shares the caller's mount
	// namespace, where those options must stay off.
	HostMounts bool

	// NoSibling restores the root task as a child of CRIU instead of as
	// a sibling. By default the restored root becomes a child of the
	// calling process (CRIU's rst_sibling), so the caller can reap it
	// directly; with NoSibling it is reparented to the nearest child
	// subreaper when CRIU exits.
	NoSibling bool
}

func (o Options) ghostLimit() uint32 {
	if o.GhostLimit == 0 {
		return 64 << 20
	}
	return o.GhostLimit
}

func (o Options) logLevel() int32 {
	if o.LogLevel <= 0 || o.LogLevel > 4 {
		return 4
	}
	return int32(o.LogLevel)
}

func (o Options) stall() time.Duration {
	if o.Stall > 0 {
		return o.Stall
	}
	return criubin.DefaultStall
}
