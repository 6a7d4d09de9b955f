package ptxgen

import "testing"

// TestProbesRun: every probe loads and runs on the emulator.
func TestProbesRun(t *testing.T) {
	for _, p := range append(Probes(), PendingProbes()...) {
		if p.Emu != nil {
			p = p.Emu
		}
		if _, _, err := RunEmulator(t.Context(), p.Program, 0); err != nil {
			t.Errorf("probe %s: %v", p.Name, err)
		}
	}
}
