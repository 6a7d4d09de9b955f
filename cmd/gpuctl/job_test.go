package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// gpuctl job refuses bad input with one line, before it starts anything.
func TestJobBadInput(t *testing.T) {
	for _, k := range []string{"SLURM_JOB_ID", "SLURM_RESTART_COUNT", "GPUCTL_SERVER", "GPUCTL_JOB_DIR"} {
		t.Setenv(k, "")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no program", []string{"job", "--job-id", "5", "--server", "h:1"}, "no program given"},
		{"no job id", []string{"job", "--server", "h:1", "--", "true"}, "no job id"},
		{"job id with a slash", []string{"job", "--job-id", "../5", "--server", "h:1", "--", "true"}, "cannot name a directory"},
		{"bad restart count", []string{"job", "--job-id", "5", "--restart-count", "x", "--server", "h:1", "--", "true"}, "restart count"},
		{"negative deadline", []string{"job", "--job-id", "5", "--deadline", "-1s", "--server", "h:1", "--", "true"}, "--deadline"},
		{"no server", []string{"job", "--job-id", "5", "--", "true"}, "no server"},
		{"server without port", []string{"job", "--job-id", "5", "--server", "h", "--", "true"}, "not HOST:PORT"},
		{"relative dir", []string{"job", "--job-id", "5", "--dir", "jobs", "--server", "h:1", "--", "true"}, "absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"gpuctl"}, tc.args...), testEnv(&out, &errOut))
			msg := strings.TrimSpace(errOut.String())
			if code != 2 || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("gpuctl %s: exit %d, %q; want exit 2 and one line about %q", strings.Join(tc.args, " "), code, msg, tc.want)
			}
		})
	}
}
