package cuda

// #include "api.h"
import "C"

// The driver's checkpoint calls, as procAPI.

func (d *driver) hasCheckpointAPI() bool {
	a := d.api
	return a.cuCheckpointProcessLock != nil && a.cuCheckpointProcessCheckpoint != nil &&
		a.cuCheckpointProcessRestore != nil && a.cuCheckpointProcessUnlock != nil &&
		a.cuCheckpointProcessGetState != nil
}

func (d *driver) lock(pid int, timeoutMs uint32) error {
	return d.check(C.gc_ckpt_lock(d.api, C.int(pid), C.uint(timeoutMs)), "cuCheckpointProcessLock")
}

func (d *driver) checkpoint(pid int) error {
	return d.check(C.gc_ckpt_checkpoint(d.api, C.int(pid)), "cuCheckpointProcessCheckpoint")
}

func (d *driver) restore(pid int, from, to [][16]byte) error {
	if len(from) == 0 {
		return d.check(C.gc_ckpt_restore(d.api, C.int(pid), nil, nil, 0), "cuCheckpointProcessRestore")
	}
	cf := make([]C.CUuuid, len(from))
	ct := make([]C.CUuuid, len(to))
	for i := range from {
		for j := range from[i] {
			cf[i].bytes[j] = C.char(from[i][j])
			ct[i].bytes[j] = C.char(to[i][j])
		}
	}
	return d.check(C.gc_ckpt_restore(d.api, C.int(pid), &cf[0], &ct[0], C.uint(len(from))), "cuCheckpointProcessRestore")
}

func (d *driver) unlock(pid int) error {
	return d.check(C.gc_ckpt_unlock(d.api, C.int(pid)), "cuCheckpointProcessUnlock")
}

func (d *driver) state(pid int) (ProcessState, error) {
	var s C.int
	err := d.check(C.gc_ckpt_state(d.api, C.int(pid), &s), "cuCheckpointProcessGetState")
	return ProcessState(s), err
}
