package worker

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestJITCacheEnv(t *testing.T) {
	state := t.TempDir()
	modules := filepath.Join(state, "modules")
	for _, tc := range []struct {
		name    string
		modules string
		set     string // CUDA_CACHE_PATH in gpud's environment; "" unset
		want    []string
	}{
		{"beside the module cache", modules, "", []string{"CUDA_CACHE_PATH=" + filepath.Join(state, "jit")}},
		{"no module cache, no JIT cache", "", "", nil},
		{"the operator's path wins", modules, "/elsewhere", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set != "" {
				t.Setenv("CUDA_CACHE_PATH", tc.set)
			} else {
				t.Setenv("CUDA_CACHE_PATH", "")
				os.Unsetenv("CUDA_CACHE_PATH")
			}
			got := jitCacheEnv(tc.modules)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("jitCacheEnv(%q) = %q, want %q", tc.modules, got, tc.want)
			}
			if len(got) > 0 {
				if st, err := os.Stat(filepath.Join(state, "jit")); err != nil || !st.IsDir() {
					t.Errorf("the JIT cache directory was not made: %v", err)
				}
			}
			if tc.set != "" && !slices.Contains(workerEnv(), "CUDA_CACHE_PATH="+tc.set) {
				t.Errorf("the operator's CUDA_CACHE_PATH does not reach the worker: %q", workerEnv())
			}
		})
	}
}
