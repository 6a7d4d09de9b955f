package criubin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatch: a call whose log or images keep growing runs on; one whose
// files stand still is cancelled with ErrStalled naming the log's last
// line.
func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		growing bool
	}{{"writing", true}, {"silent", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "dump.log")
			if err := os.WriteFile(log, []byte("(00.01) first\n(00.02) Waiting for 7 to trap\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, stop := Watch(context.Background(), "dump", log, dir, 300*time.Millisecond, 20*time.Millisecond)
			defer stop()
			end := time.Now().Add(time.Second)
			for time.Now().Before(end) && ctx.Err() == nil {
				if tc.growing {
					f, err := os.OpenFile(filepath.Join(dir, "pages-1.img"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = f.Write(make([]byte, 4096))
					f.Close()
				}
				time.Sleep(50 * time.Millisecond)
			}
			var st *ErrStalled
			switch {
			case tc.growing && ctx.Err() != nil:
				t.Fatalf("a call that kept writing was stopped: %v", context.Cause(ctx))
			case !tc.growing && !errors.As(context.Cause(ctx), &st):
				t.Fatalf("a silent call was not stopped within a second (cause %v)", context.Cause(ctx))
			case !tc.growing && st.Where != "(00.02) Waiting for 7 to trap":
				t.Errorf("stall names the log line %q", st.Where)
			}
		})
	}
}
