package kernels

import (
	"encoding/binary"
	"fmt"
	"maps"
	"unsafe"

	"github.com/gpuctl/gpuctl/errs"
)

// Mem holds a case's buffers and globals by name as little-endian bytes:
// the device memory a launch reads and writes.
type Mem map[string][]byte

// Clone returns a deep copy.
func (m Mem) Clone() Mem {
	out := make(Mem, len(m))
	for k, v := range maps.All(m) {
		out[k] = append([]byte(nil), v...)
	}
	return out
}

// Elem is the Go type of a buffer element.
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Get decodes buffer name as a []T (a copy). It panics when the buffer is
// missing or T's size does not match; references run under
// [Case.Reference], which turns such a panic into an error naming the case.
func Get[T Elem](m Mem, name string) []T {
	b, ok := m[name]
	if !ok {
		panic(fmt.Sprintf("no buffer %q", name))
	}
	var zero T
	if len(b)%int(unsafe.Sizeof(zero)) != 0 {
		panic(fmt.Sprintf("buffer %q: %d bytes is not a whole number of %T", name, len(b), zero))
	}
	out := make([]T, len(b)/int(unsafe.Sizeof(zero)))
	if _, err := binary.Decode(b, binary.LittleEndian, out); err != nil {
		panic(fmt.Sprintf("buffer %q: %v", name, err))
	}
	return out
}

// Put encodes v into buffer name, which must exist with the same byte size.
func Put[T Elem](m Mem, name string, v []T) {
	b, ok := m[name]
	if !ok {
		panic(fmt.Sprintf("no buffer %q", name))
	}
	var zero T
	if len(v)*int(unsafe.Sizeof(zero)) != len(b) {
		panic(fmt.Sprintf("buffer %q: writing %d %T into %d bytes", name, len(v), zero, len(b)))
	}
	if _, err := binary.Encode(b, binary.LittleEndian, v); err != nil {
		panic(fmt.Sprintf("buffer %q: %v", name, err))
	}
}

// Inputs generates the initial contents of every buffer parameter and of
// every global that is not "keep". Globals marked keep are absent: their
// contents come from the module's initializer.
func (c *Case) Inputs() (Mem, error) {
	m := Mem{}
	for _, p := range c.Params {
		if p.Buffer != nil {
			m[p.Name] = p.Buffer.Init.generate(p.Type, p.Buffer.Count)
		}
	}
	for _, g := range c.Globals {
		if g.Init.Kind != InitKeep {
			m[g.Name] = g.Init.generate(g.Type, g.Count)
		}
	}
	return m, nil
}

// refFunc simulates one launch of a kernel on m, in place. A global marked
// keep is present in m with its module initializer's value.
type refFunc func(c *Case, m Mem)

// Reference returns the memory after c.Launches launches starting from in
// (which it does not modify). Globals marked keep are filled with the
// initializers their source file declares.
func (c *Case) Reference(in Mem) (out Mem, err error) {
	if c.Expect != "" {
		return nil, errs.New(errs.FailedPrecondition, caseSubject(c.Name), "the launch is expected to fail with %s; there are no outputs", c.Expect)
	}
	ref, ok := references[c.Kernel]
	if !ok {
		return nil, errs.New(errs.NotFound, caseSubject(c.Name), "no CPU reference for kernel %s", c.Kernel)
	}
	m := in.Clone()
	for _, g := range c.Globals {
		if _, have := m[g.Name]; have {
			continue
		}
		init, ok := globalInitializers[c.Module][g.Name]
		if !ok || len(init) != g.Bytes() {
			return nil, errs.New(errs.InvalidArgument, caseSubject(c.Name), "global %s is keep, but module %s's initializer for it is not known (%d bytes declared)", g.Name, c.Module, g.Bytes())
		}
		m[g.Name] = append([]byte(nil), init...)
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, errs.New(errs.Internal, caseSubject(c.Name), "reference for kernel %s: %v", c.Kernel, r)
		}
	}()
	for range c.Launches {
		ref(c, m)
	}
	return m, nil
}

// HasReference reports whether kernel has a CPU reference.
func HasReference(kernel string) bool {
	_, ok := references[kernel]
	return ok
}
