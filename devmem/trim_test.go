package devmem

import (
	"context"
	"errors"
	"testing"
)

// trimmingDev adds backend.ContextTrimmer to fakeDev: a context limit
// that the trim lowers and the untrim sets back, and the order of calls.
type trimmingDev struct {
	*fakeDev
	limit, saved uint64
	calls        []string
	trimErr      error
}

func (d *trimmingDev) ReleaseMem(ctx context.Context) error {
	d.calls = append(d.calls, "release")
	return d.fakeDev.ReleaseMem(ctx)
}

func (d *trimmingDev) RestoreMem(ctx context.Context) error {
	d.calls = append(d.calls, "restore")
	return d.fakeDev.RestoreMem(ctx)
}

func (d *trimmingDev) TrimContexts(context.Context) error {
	d.calls = append(d.calls, "trim")
	if d.trimErr != nil {
		return d.trimErr
	}
	if d.saved == 0 {
		d.saved, d.limit = d.limit, 16
	}
	return nil
}

func (d *trimmingDev) UntrimContexts(context.Context) error {
	d.calls = append(d.calls, "untrim")
	if d.saved != 0 {
		d.limit, d.saved = d.saved, 0
	}
	return nil
}

func TestSaveTrimsAndReloadUntrims(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		release  bool
		trimErr  error
		wantCall []string
	}{
		{"release trims after releasing", true, nil, []string{"release", "trim", "restore", "untrim"}},
		{"no release, no trim", false, nil, []string{"restore", "untrim"}},
		{"a failed trim is reported, not fatal", true, errors.New("driver said no"), []string{"release", "trim", "restore", "untrim"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &trimmingDev{fakeDev: newFakeDev(3<<20, 1<<20), limit: 4096, trimErr: tc.trimErr}
			want := d.snapshot()
			tr := NewTracker()
			f, sv, err := tr.Save(ctx, d, SaveRequest{Release: tc.release})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if tc.release && tc.trimErr == nil && d.limit != 16 {
				t.Errorf("after the save the limit is %d, want it trimmed to 16", d.limit)
			}
			if (sv.TrimError != "") != (tc.trimErr != nil) {
				t.Errorf("TrimError %q, trim failure %v", sv.TrimError, tc.trimErr)
			}
			if err := tr.Reload(ctx, d, f, sv.LayoutOff, sv.LayoutLen); err != nil {
				t.Fatal(err)
			}
			if d.limit != 4096 {
				t.Errorf("after the reload the limit is %d, want the program's 4096 back", d.limit)
			}
			d.equal(t, want)
			if len(d.calls) != len(tc.wantCall) {
				t.Fatalf("calls %v, want %v", d.calls, tc.wantCall)
			}
			for i := range d.calls {
				if d.calls[i] != tc.wantCall[i] {
					t.Fatalf("calls %v, want %v", d.calls, tc.wantCall)
				}
			}
		})
	}
}
