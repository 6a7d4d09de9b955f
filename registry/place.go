package registry

import (
	"sort"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/api"
)

// Candidates are the hosts an image made on self may go to (a replica, a
// restore), best first: up, not self and not in holds, the same backend,
// a GPU of self's model and a driver not older (so that the image can be
// restored there), then the most free device memory (room to resume the
// session) and the smallest store. why says why each other host was left
// out.
func Candidates(self Host, hs []Host, holds map[string]bool) (peers []Host, why []string) {
	model := ""
	if len(self.GPUs) > 0 {
		model = self.GPUs[0].Name
	}
	for _, h := range hs {
		switch {
		case h.Name == self.Name || holds[h.Name]:
		case h.State != StateUp:
			why = append(why, h.Name+": down")
		case h.Backend != self.Backend:
			why = append(why, h.Name+": runs "+h.Backend+", not "+self.Backend)
		case model != "" && !HasModel(h.GPUs, model):
			why = append(why, h.Name+": no "+model+" GPU")
		case OlderDriver(h.Driver, self.Driver):
			why = append(why, h.Name+": driver "+h.Driver+" older than "+self.Driver)
		default:
			peers = append(peers, h)
		}
	}
	sort.SliceStable(peers, func(i, j int) bool {
		if peers[i].MemFreeBytes != peers[j].MemFreeBytes {
			return peers[i].MemFreeBytes > peers[j].MemFreeBytes
		}
		if peers[i].StoreBytes != peers[j].StoreBytes {
			return peers[i].StoreBytes < peers[j].StoreBytes
		}
		return peers[i].Name < peers[j].Name
	})
	return peers, why
}

// HasModel reports whether one of gpus is of the given model.
func HasModel(gpus []api.GPU, model string) bool {
	for _, g := range gpus {
		if g.Name == model {
			return true
		}
	}
	return false
}

// OlderDriver reports whether driver version a is older than b, comparing
// dotted numbers; an unknown version is never older.
func OlderDriver(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) && i < len(pb); i++ {
		x, err1 := strconv.Atoi(pa[i])
		y, err2 := strconv.Atoi(pb[i])
		if err1 != nil || err2 != nil {
			return false
		}
		if x != y {
			return x < y
		}
	}
	return len(pa) < len(pb)
}
