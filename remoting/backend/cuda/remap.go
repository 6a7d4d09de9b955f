package cuda

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Snapshot is what a checkpoint records about a session's GPUs, for the
// image manifest: enough to refuse an incompatible host before anything is
// touched, and to plan the driver's GPU map on a compatible one.
type Snapshot struct {
	// Driver is the NVIDIA driver version of the host that took the
	// checkpoint, as NVML reports it ("580.159.04").
	Driver string `json:"driver"`
	// Device is the GPU the session ran on.
	Device backend.GPU `json:"device"`
	// Enumerated lists the UUID of every GPU the worker process saw, in
	// CUDA ordinal order. A restore elsewhere must map each of them.
	Enumerated []string `json:"enumerated"`
}

// Snapshot describes this device for a checkpoint taken now.
func (d *Device) Snapshot(driverVersion string) Snapshot {
	return Snapshot{Driver: driverVersion, Device: d.GPU(), Enumerated: d.Enumerated()}
}

// CheckCompatible refuses, with one error that says why, a host on which
// the driver could not restore s: another backend, an older driver, fewer
// GPUs than the worker enumerated, or no GPU of the session's model.
func CheckCompatible(s Snapshot, host backend.HostInfo) error {
	sub := "host"
	if host.Backend != "cuda" {
		return errs.New(errs.FailedPrecondition, sub, "the image holds CUDA state of an %s, but this host runs the %q backend: restore it on a host with an NVIDIA GPU",
			s.Device.Name, host.Backend)
	}
	older, err := olderDriver(host.DriverVersion, s.Driver)
	if err != nil {
		return err
	}
	if older {
		return errs.New(errs.FailedPrecondition, sub, "the image was taken with NVIDIA driver %s and this host has %s: the driver cannot restore onto an older driver; upgrade it or pick another host",
			s.Driver, host.DriverVersion)
	}
	if len(host.GPUs) < len(s.Enumerated) {
		return errs.New(errs.FailedPrecondition, sub, "the session's worker saw %d GPUs and this host has %d: the driver must map every one of them on restore; pick a host with at least %d GPUs",
			len(s.Enumerated), len(host.GPUs), len(s.Enumerated))
	}
	if len(matching(s, host)) == 0 {
		var names []string
		for _, g := range host.GPUs {
			names = append(names, g.Name)
		}
		return errs.New(errs.FailedPrecondition, sub, "the image was taken on an %s (%d MiB) and this host has no such GPU (it has %s): restore it on a host with the same GPU model",
			s.Device.Name, s.Device.MemoryBytes>>20, strings.Join(names, ", "))
	}
	return nil
}

// matching returns the host's GPUs a session from s may run on: the same
// model with at least as much memory.
func matching(s Snapshot, host backend.HostInfo) []backend.GPU {
	var out []backend.GPU
	for _, g := range host.GPUs {
		if g.Name == s.Device.Name && g.MemoryBytes >= s.Device.MemoryBytes {
			out = append(out, g)
		}
	}
	return out
}

// PlanRestore checks host against s, picks the GPU to restore on and
// returns the map the driver needs. want names a GPU by UUID; empty picks
// the session's own GPU when the host has it, else the first of the same
// model. pairs is nil when the session stays on the GPUs it saw.
func PlanRestore(s Snapshot, host backend.HostInfo, want string) (target string, pairs []GPUPair, err error) {
	if err := CheckCompatible(s, host); err != nil {
		return "", nil, err
	}
	ok := matching(s, host)
	switch {
	case want != "":
		i := slices.IndexFunc(ok, func(g backend.GPU) bool { return strings.EqualFold(g.UUID, want) })
		if i < 0 {
			return "", nil, errs.New(errs.FailedPrecondition, "host", "GPU %s cannot hold this session: it must be an %s with at least %d MiB on this host",
				want, s.Device.Name, s.Device.MemoryBytes>>20)
		}
		target = ok[i].UUID
	case slices.ContainsFunc(ok, func(g backend.GPU) bool { return strings.EqualFold(g.UUID, s.Device.UUID) }):
		target = s.Device.UUID
	default:
		target = ok[0].UUID
	}
	var uuids []string
	for _, g := range host.GPUs {
		uuids = append(uuids, g.UUID)
	}
	pairs, err = PlanRemap(s.Enumerated, uuids, s.Device.UUID, target)
	return target, pairs, err
}

// PlanRemap returns the GPU map for a restore that moves a session from
// GPU from to GPU to. saw lists the UUIDs of every GPU the process
// enumerated; host lists the restoring host's GPUs.
//
// The driver accepts only a full permutation: every GPU in saw mapped to a
// distinct GPU of host (a single pair fails with invalid argument). So
// from goes to to, every other GPU of saw that the host has and that is
// still free stays where it is, and the rest take the host's remaining
// GPUs in order. On one host, moving GPU0 to GPU1 swaps them.
//
// The result is nil when nothing moves: from == to and the host has every
// GPU of saw.
func PlanRemap(saw, host []string, from, to string) ([]GPUPair, error) {
	bad := func(format string, args ...any) ([]GPUPair, error) {
		return nil, errs.New(errs.InvalidArgument, "", "GPU map: "+format, args...)
	}
	if dup := firstDup(saw); dup != "" {
		return bad("the process saw GPU %s twice", dup)
	}
	if dup := firstDup(host); dup != "" {
		return bad("the host lists GPU %s twice", dup)
	}
	if !containsFold(saw, from) {
		return bad("the session's GPU %s is not among the GPUs its process saw (%s)", from, strings.Join(saw, ", "))
	}
	if !containsFold(host, to) {
		return bad("target GPU %s is not on this host (%s)", to, strings.Join(host, ", "))
	}
	if len(host) < len(saw) {
		return bad("the process saw %d GPUs and the host has only %d; each needs a distinct target", len(saw), len(host))
	}
	stays := strings.EqualFold(from, to)
	for _, u := range saw {
		stays = stays && containsFold(host, u)
	}
	if stays {
		return nil, nil
	}
	target := make([]string, len(saw))
	used := map[string]bool{strings.ToUpper(to): true}
	for i, u := range saw {
		if strings.EqualFold(u, from) {
			target[i] = to
		}
	}
	for i, u := range saw {
		if target[i] == "" && containsFold(host, u) && !used[strings.ToUpper(u)] {
			target[i] = u
			used[strings.ToUpper(u)] = true
		}
	}
	free := 0
	for i := range saw {
		if target[i] != "" {
			continue
		}
		for used[strings.ToUpper(host[free])] {
			free++
		}
		target[i] = host[free]
		used[strings.ToUpper(host[free])] = true
	}
	pairs := make([]GPUPair, len(saw))
	for i, u := range saw {
		pairs[i] = GPUPair{From: u, To: target[i]}
	}
	return pairs, nil
}

// Remapped returns what saw becomes after a restore with pairs: the
// physical GPUs now behind each of the process's ordinals. A later
// checkpoint records this list as its Enumerated.
func Remapped(saw []string, pairs []GPUPair) []string {
	out := slices.Clone(saw)
	for i, u := range saw {
		for _, p := range pairs {
			if strings.EqualFold(p.From, u) {
				out[i] = p.To
			}
		}
	}
	return out
}

func containsFold(list []string, s string) bool {
	return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}

func firstDup(list []string) string {
	seen := map[string]bool{}
	for _, u := range list {
		k := strings.ToUpper(u)
		if seen[k] {
			return u
		}
		seen[k] = true
	}
	return ""
}

// olderDriver reports whether version have is older than need. Versions
// are NVIDIA's dotted numbers ("580.159.04"), compared field by field.
func olderDriver(have, need string) (bool, error) {
	h, err := parseVersion(have)
	if err != nil {
		return false, errs.Wrap(err, errs.FailedPrecondition, "host", "reading its driver version")
	}
	n, err := parseVersion(need)
	if err != nil {
		return false, errs.Wrap(err, errs.DataLoss, "", "reading the image's driver version")
	}
	return slices.Compare(h, n) < 0, nil
}

func parseVersion(v string) ([]int, error) {
	if v == "" {
		return nil, fmt.Errorf("no driver version recorded")
	}
	var out []int
	for _, f := range strings.Split(v, ".") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("driver version %q is not dotted numbers", v)
		}
		out = append(out, n)
	}
	return out, nil
}
