package cuda

import "sort"

// span is one range of device addresses the session may name: an
// allocation it made, or a module global it looked up.
type span struct {
	base, size uint64
	module     uint64 // the module handle that owns a global; 0 for allocations
}

// spans is a sorted, non-overlapping set of device ranges. Every device
// pointer a client sends is checked against it, so that a bad pointer is
// CUDA_ERROR_INVALID_VALUE from us rather than whatever the driver does
// with an address this process never allocated.
type spans struct {
	s []span
}

// add records a range. The driver never hands out overlapping ranges, so
// an overlap means the table is out of date (a range freed behind our
// back); the stale entries are dropped in favour of the new one.
func (r *spans) add(x span) {
	if x.size == 0 {
		return
	}
	i := sort.Search(len(r.s), func(i int) bool { return r.s[i].base >= x.base })
	lo, hi := i, i
	for lo > 0 && r.s[lo-1].base+r.s[lo-1].size > x.base {
		lo--
	}
	for hi < len(r.s) && r.s[hi].base < x.base+x.size {
		hi++
	}
	r.s = append(r.s[:lo], append([]span{x}, r.s[hi:]...)...)
}

// remove drops the range that starts exactly at base and reports whether
// there was one.
func (r *spans) remove(base uint64) (span, bool) {
	i := sort.Search(len(r.s), func(i int) bool { return r.s[i].base >= base })
	if i == len(r.s) || r.s[i].base != base {
		return span{}, false
	}
	x := r.s[i]
	r.s = append(r.s[:i], r.s[i+1:]...)
	return x, true
}

// find returns the range holding p.
func (r *spans) find(p uint64) (span, bool) {
	i := sort.Search(len(r.s), func(i int) bool { return r.s[i].base > p })
	if i == 0 {
		return span{}, false
	}
	x := r.s[i-1]
	if p-x.base >= x.size {
		return span{}, false
	}
	return x, true
}

// contains reports whether [p, p+n) lies inside one range. n == 0 asks
// only that p be inside or at the end of one.
func (r *spans) contains(p, n uint64) bool {
	if n == 0 {
		i := sort.Search(len(r.s), func(i int) bool { return r.s[i].base > p })
		return i > 0 && p-r.s[i-1].base <= r.s[i-1].size
	}
	x, ok := r.find(p)
	if !ok {
		return false
	}
	return n <= x.size-(p-x.base)
}

// covers reports whether [p, p+n) lies inside ranges that follow one
// another without a gap. VMM mappings placed back to back in one
// reservation are one range of addresses to the driver, and PyTorch's
// expandable segments copy across the seams.
func (r *spans) covers(p, n uint64) bool {
	if n == 0 {
		return r.contains(p, 0)
	}
	for {
		x, ok := r.find(p)
		if !ok {
			return false
		}
		left := x.size - (p - x.base)
		if n <= left {
			return true
		}
		p, n = p+left, n-left
	}
}

// dropModule removes every global that belongs to module m.
func (r *spans) dropModule(m uint64) {
	out := r.s[:0]
	for _, x := range r.s {
		if x.module != m {
			out = append(out, x)
		}
	}
	r.s = out
}

// allocations returns the ranges made by MemAlloc, for release on close.
func (r *spans) allocations() []span {
	var out []span
	for _, x := range r.s {
		if x.module == 0 {
			out = append(out, x)
		}
	}
	return out
}
