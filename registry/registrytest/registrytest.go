// Package registrytest starts an embedded registry for tests.
package registrytest

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/embedded"
)

// Start runs a single-member registry in a temporary directory on free
// loopback ports until the test ends, and returns its endpoint.
func Start(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cp, pp := FreePort(t), FreePort(t)
	s, err := embedded.Start(ctx, embedded.Config{
		DataDir: t.TempDir(), Listen: fmt.Sprintf("127.0.0.1:%d", cp), Peer: fmt.Sprintf("127.0.0.1:%d", pp),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Endpoint()
}

// Dial connects a client to endpoint, closed when the test ends.
func Dial(t testing.TB, endpoint string) *registry.Client {
	t.Helper()
	c, err := registry.Dial(context.Background(), []string{endpoint}, registry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// FreePort is a loopback TCP port nobody listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
