// Package preempt takes device memory back from sessions of lower
// priority and gives it back when there is room again.
//
//   - Automatically: when a session's allocation does not fit on the
//     device (the session table's ledger, session.Config.DeviceBytes),
//     the table asks Service.MakeRoom, which picks the sessions that give
//     way (Victims) and preempts them: checkpoint, release the worker,
//     state preempted. The allocation then goes through. Sessions of equal
//     or higher priority never give way; when those of lower priority do
//     not hold enough, nothing is preempted and the allocation fails at
//     once with CUDA_ERROR_OUT_OF_MEMORY.
//   - On request (gpuctl preempt, a scheduler's hook): the same preemption
//     within a deadline; a checkpoint that cannot finish in time is rolled
//     back and the session keeps running.
//
// Sessions gpud preempted itself are resumed by gpud, highest priority
// first, as soon as they fit (ResumeOrder); sessions preempted on request
// wait for gpuctl resume, which may restore them on another host. Their
// clients stall meanwhile (the listener answers their reconnects with
// wire.StatusPreempted) and then go on.
package preempt

import (
	"sort"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/session"
)

// Victims picks the sessions that give way so that a session of priority
// prio gets need more bytes: among the preemptible candidates of lower
// priority, the lowest priority first, then the least recently active,
// until they hold need bytes. When all of them together hold less, it
// picks none and says so (errs.ResourceExhausted): preempting them would
// not help.
func Victims(prio int32, need uint64, cands []session.Candidate) ([]session.Candidate, error) {
	var pool []session.Candidate
	var avail uint64
	for _, c := range cands {
		if c.Preemptible && c.Priority < prio && c.Held > 0 {
			pool = append(pool, c)
			avail += c.Held
		}
	}
	if avail < need {
		if len(pool) == 0 {
			return nil, errs.New(errs.ResourceExhausted, "", "no session of lower priority than %d holds device memory to give up", prio)
		}
		return nil, errs.New(errs.ResourceExhausted, "", "the %d session(s) of lower priority than %d hold %d bytes, less than the %d needed",
			len(pool), prio, avail, need)
	}
	sort.Slice(pool, func(i, j int) bool {
		a, b := pool[i], pool[j]
		if a.Priority != b.Priority {
			return a.Priority < b.Priority
		}
		if !a.ActiveAt.Equal(b.ActiveAt) {
			return a.ActiveAt.Before(b.ActiveAt)
		}
		return a.ID < b.ID
	})
	var out []session.Candidate
	var got uint64
	for _, c := range pool {
		if got >= need {
			break
		}
		out = append(out, c)
		got += c.Held
	}
	return out, nil
}

// ResumeOrder is the preempted sessions to resume now, given free bytes
// on the device: highest priority first, then the longest preempted, each
// while it fits. It stops at the first that does not fit, so that a
// smaller session of lower priority never takes the room a higher one is
// waiting for.
func ResumeOrder(free uint64, preempted []session.Candidate) []session.Candidate {
	list := append([]session.Candidate(nil), preempted...)
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.ActiveAt.Equal(b.ActiveAt) {
			return a.ActiveAt.Before(b.ActiveAt)
		}
		return a.ID < b.ID
	})
	var out []session.Candidate
	for _, c := range list {
		if c.Held > free {
			break
		}
		out = append(out, c)
		free -= c.Held
	}
	return out
}
