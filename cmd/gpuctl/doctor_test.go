package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/control"
)

// fakeHost serves the two routes doctor reads, behind the token check.
func fakeHost(t *testing.T, token string, hostJSON string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/host", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(hostJSON))
	})
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		control.WriteJSON(w, []map[string]any{{"id": "i-1", "session": "s-1", "bytes": 1000}, {"id": "i-2", "session": "s-1", "bytes": 24}})
	})
	srv := httptest.NewServer(control.RequireToken(token, mux))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestDoctor(t *testing.T) {
	emu := `{"backend":"emulated","driver_version":"13.0","gpus":[{"index":0,"name":"gpuctl emulated","uuid":"GPU-e","memory_bytes":1073741824}],` +
		`"criu":{"path":"/opt/gpuctl/bin/criu/criu","source":"bundle","version":"4.1.1"}}`
	nocriu := `{"backend":"emulated","driver_version":"13.0","gpus":[{"index":0,"name":"gpuctl emulated","uuid":"GPU-e","memory_bytes":1073741824}],` +
		`"criu":{"error":"criu not found: run make deps"}}`
	bare := `{"backend":"cuda","driver_version":"580.1","gpus":[]}`
	dir := t.TempDir()
	smi := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(smi, []byte("#!/bin/sh\necho '0, NVIDIA H200, GPU-aa, 143771, 00000000:19:00.0, 580.159.04'\necho '1, NVIDIA H200, GPU-bb, 143771, 00000000:3B:00.0, 580.159.04'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken-smi")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name        string
		args        doctorArgs
		hostJSON    string
		wantProblem []string // substrings, one per expected problem line
		wantText    []string
		wantGPUs    int
	}{
		{
			name:        "missing criu",
			args:        doctorArgs{criu: "/nonexistent/criu", nvidiaSMI: "/nonexistent/nvidia-smi"},
			wantProblem: []string{"criu binary"},
			wantText:    []string{"criu     not found", "gpus     none here"},
		},
		{
			name:     "healthy host with images",
			args:     doctorArgs{token: "tok", hostSet: true, nvidiaSMI: smi},
			hostJSON: emu,
			wantText: []string{"backend emulated", "1 GPU(s)", "criu: 4.1.1 at /opt/gpuctl/bin/criu/criu (bundle)",
				"2 image(s), 1.0 KiB", "gpus     2 here, driver 580.159.04"},
			wantGPUs: 2,
		},
		{
			name:        "host without criu",
			args:        doctorArgs{token: "tok", hostSet: true, nvidiaSMI: "/nonexistent/nvidia-smi"},
			hostJSON:    nocriu,
			wantProblem: []string{"cannot checkpoint: criu not found"},
			wantText:    []string{"criu: none (criu not found"},
		},
		{
			name:        "wrong token",
			args:        doctorArgs{token: "bad", hostSet: true, nvidiaSMI: "/nonexistent/nvidia-smi"},
			hostJSON:    emu,
			wantProblem: []string{"token"},
		},
		{
			name:        "cuda host without GPUs",
			args:        doctorArgs{token: "tok", hostSet: true, nvidiaSMI: "/nonexistent/nvidia-smi"},
			hostJSON:    bare,
			wantProblem: []string{"reports no GPUs"},
		},
		{
			name:        "unreachable named host",
			args:        doctorArgs{host: "127.0.0.1:1", token: "tok", hostSet: true, nvidiaSMI: "/nonexistent/nvidia-smi"},
			wantProblem: []string{"cannot reach gpud"},
		},
		{
			name:     "default host down is only a note",
			args:     doctorArgs{host: "127.0.0.1:1", token: "tok", nvidiaSMI: "/nonexistent/nvidia-smi"},
			wantText: []string{"note     no gpud answered"},
		},
		{
			name:        "broken driver",
			args:        doctorArgs{nvidiaSMI: broken},
			wantProblem: []string{"could not communicate with the NVIDIA driver"},
		},
		{
			name:        "missing state dir",
			args:        doctorArgs{stateDir: filepath.Join(dir, "none"), nvidiaSMI: "/nonexistent/nvidia-smi"},
			wantProblem: []string{"does not exist"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := c.args
			if c.hostJSON != "" {
				a.host = fakeHost(t, "tok", c.hostJSON)
			}
			if a.criu == "" {
				a.criu = os.Getenv("GPUCTL_CRIU")
			}
			r := diagnose(context.Background(), a)
			probs := r.Problems[:0:0]
			for _, p := range r.Problems {
				// Root and CRIU availability here depend on the machine,
				// not the case; the host's CRIU is the case's.
				if !strings.HasPrefix(p, "not root") && (c.args.criu != "" || !strings.Contains(p, "criu") || strings.Contains(p, "cannot checkpoint")) {
					probs = append(probs, p)
				}
			}
			if len(probs) != len(c.wantProblem) {
				t.Fatalf("problems %q, want %d matching %q", probs, len(c.wantProblem), c.wantProblem)
			}
			for i, w := range c.wantProblem {
				if !strings.Contains(probs[i], w) {
					t.Errorf("problem %q does not mention %q", probs[i], w)
				}
			}
			if len(r.LocalGPU.GPUs) != c.wantGPUs {
				t.Errorf("%d local GPUs, want %d", len(r.LocalGPU.GPUs), c.wantGPUs)
			}
			var out bytes.Buffer
			printDoctor(&env{stdout: &out, stderr: &out}, r)
			for _, w := range c.wantText {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			// --json is the same report, and round-trips.
			out.Reset()
			if err := (&env{stdout: &out}).printJSON(r); err != nil {
				t.Fatal(err)
			}
			var back doctorReport
			if err := json.Unmarshal(out.Bytes(), &back); err != nil {
				t.Fatalf("doctor --json is not JSON: %v", err)
			}
			if len(back.Problems) != len(r.Problems) || back.Kernel == "" {
				t.Errorf("JSON report lost fields: %s", out.String())
			}
			if r.CRIU.Path != "" && (r.CRIU.Source == "" || back.CRIU.Source != r.CRIU.Source) {
				t.Errorf("the local criu's source is missing: %+v, JSON %+v", r.CRIU, back.CRIU)
			}
			if h := r.Host; h != nil && h.Reachable && strings.Contains(c.hostJSON, `"criu"`) && (h.CRIU == nil || back.Host.CRIU == nil) {
				t.Errorf("the host's criu is missing from the report: %s", out.String())
			}
		})
	}
}

func TestDoctorExitStatus(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"gpuctl", "doctor", "--criu", "/nonexistent/criu"}, &env{stdout: &out, stderr: &errOut})
	if code == 0 {
		t.Fatalf("doctor with a missing criu exited 0:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "problem  ") || !strings.Contains(errOut.String(), "problem") {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	cases := []struct {
		in     string
		n      int
		driver string
	}{
		{"0, NVIDIA H200, GPU-1, 143771, 00000000:19:00.0, 580.159.04", 1, "580.159.04"},
		{"", 0, ""},
		{"garbage line\n0, A, U, x, B, D", 0, ""},
	}
	for _, c := range cases {
		g, d := parseNvidiaSMI(c.in)
		if len(g) != c.n || d != c.driver {
			t.Errorf("parse(%q) = %d GPUs, driver %q; want %d, %q", c.in, len(g), d, c.n, c.driver)
		}
		if c.n == 1 && g[0].MemoryBytes != 143771<<20 {
			t.Errorf("memory %d", g[0].MemoryBytes)
		}
	}
}
