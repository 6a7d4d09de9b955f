package main

import (
	"os/exec"
	"strings"
	"testing"
)

// gpuctl is a thin client of gpud's API: it links the API's types and the
// typed client, never what serves them. This test holds it to that, as
// tailscale's deps tests hold its CLI.
func TestDependencies(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	t.Logf("gpuctl links %d packages", len(deps))

	// The project's own packages gpuctl may link; anything else of ours
	// is gpud's side (store, images, pipelines, sessions, remoting).
	const self = "github.com/gpuctl/gpuctl/"
	ours := map[string]bool{
		self + "cmd/gpuctl":              true,
		self + "api":                     true, // the API's routes and bodies
		self + "control":                 true, // the typed client, TLS
		self + "errs":                    true,
		self + "checkpoint/criu/criubin": true, // doctor: the criu binary, as a command
		self + "jobckpt":                 true, // job: the program's side of a job's checkpoint, CRIU as a command
		self + "registry":                true, // --registry: etcd's client, never its server
	}
	// Outside packages that only gpud's side needs.
	theirs := map[string]string{
		"go.etcd.io/bbolt":                      "the store's database",
		"github.com/checkpoint-restore/go-criu": "CRIU's RPC messages",
		// google.golang.org/protobuf comes with etcd's client (gRPC); the
		// server, its raft and its database stay gpud's.
		"go.etcd.io/etcd/server":        "the embedded registry server (gpud registry)",
		"go.etcd.io/raft":               "the embedded registry server's consensus",
		"github.com/klauspost/compress": "the store's chunk compression",
		"github.com/zeebo/blake3":       "the store's chunk digests",
		"github.com/NVIDIA/go-nvml":     "the cuda backend",
		"github.com/prometheus":         "gpud's metrics",
	}
	for _, p := range deps {
		if strings.HasPrefix(p, self) && !ours[p] {
			t.Errorf("gpuctl depends on %s, which is gpud's side; move what gpuctl needs into api, control or a package as light", p)
		}
		for prefix, why := range theirs {
			if p == prefix || strings.HasPrefix(p, prefix+"/") {
				t.Errorf("gpuctl depends on %s (%s)", p, why)
			}
		}
	}
}
