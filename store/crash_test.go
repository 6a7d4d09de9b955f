package store

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const crashHelperEnv = "GPUCTL_STORE_CRASH_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashHelperEnv); dir != "" {
		crashHelper(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// crashHelper writes images into the store at dir until it is killed:
// new and shared chunks, several packs per image, deletes and gcs in
// between, so that a kill can land anywhere in a put.
func crashHelper(dir string) {
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{PackSize: 96 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for n := 0; ; n++ {
		in := s.NewIngest()
		var refs []Digest
		for range 4 + r.IntN(12) {
			var c []byte
			if r.IntN(3) == 0 {
				c = chunkData("text", uint64(r.IntN(8)), 16<<10) // shared across images
			} else {
				c = chunkData("random", r.Uint64(), 4<<10+r.IntN(28<<10))
			}
			d, _, err := in.Put(ctx, c)
			if err != nil {
				fmt.Println("put:", err)
				os.Exit(1)
			}
			refs = append(refs, d)
		}
		distinct := map[Digest]bool{}
		for _, d := range refs {
			distinct[d] = true
		}
		info, _ := json.Marshal(map[string]any{"session": "s-crash", "distinct": len(distinct)})
		id := fmt.Sprintf("img-%d-%d", os.Getpid(), n)
		if err := in.Commit(ctx, &ImageRecord{ID: id, Info: info, Manifest: []byte("m"), Refs: refs}); err != nil {
			fmt.Println("commit:", err)
			os.Exit(1)
		}
		switch r.IntN(4) {
		case 0:
			_ = s.DeleteImage(ctx, id)
		case 1:
			_, _ = s.GC(ctx)
		}
	}
}

// TestCrashDuringPuts kills a writing subprocess with SIGKILL at random
// points, then checks that what is left opens, is consistent, verifies,
// lists only whole images, and that gc takes every leftover.
func TestCrashDuringPuts(t *testing.T) {
	runs := 50
	if testing.Short() {
		runs = 10
	}
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(42, 42))
	torn := 0
	for i := range runs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashHelperEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("run %d: helper said %q", i, line)
		}
		time.Sleep(time.Duration(r.IntN(40_000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		if checkAfterCrash(t, dir, i) {
			torn++
		}
	}
	// The kills must land mid-put often enough for this test to mean
	// something.
	t.Logf("%d of %d kills left a partial put behind", torn, runs)
	if torn < runs/5 {
		t.Fatalf("only %d of %d kills interrupted a put", torn, runs)
	}
}

// checkAfterCrash reports whether the kill left leftovers for gc.
func checkAfterCrash(t *testing.T, dir string, run int) bool {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, dir, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("run %d: open after kill: %v", run, err)
	}
	defer s.Close()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("run %d: %v", run, err)
	}
	imgs, err := s.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs {
		var info struct{ Distinct int }
		_ = json.Unmarshal(im.Info, &info)
		refs, err := s.ImageRefs(ctx, im.ID)
		if err != nil || len(refs) != info.Distinct || info.Distinct == 0 {
			t.Fatalf("run %d: image %s lists %d chunks, was committed with %d (%v)", run, im.ID, len(refs), info.Distinct, err)
		}
	}
	if bad, err := s.Verify(ctx, nil, nil); err != nil || len(bad) > 0 {
		t.Fatalf("run %d: verify: %v %v", run, bad, err)
	}
	st, err := s.GC(ctx)
	if err != nil {
		t.Fatalf("run %d: gc: %v", run, err)
	}
	if ents, _ := os.ReadDir(s.tmpDir()); len(ents) != 0 {
		t.Fatalf("run %d: gc left %d temporary files", run, len(ents))
	}
	packs, _ := os.ReadDir(s.packsDir())
	indexed, unused := 0, 0
	_ = s.view(func(tx *bolt.Tx) error {
		indexed = tx.Bucket(bucketPacks).Stats().KeyN
		return tx.Bucket(bucketChunks).ForEach(func(_, v []byte) error {
			if r, _ := decodeChunkRecord(v); r.Refs == 0 {
				unused++
			}
			return nil
		})
	})
	if len(packs) != indexed || unused != 0 {
		t.Fatalf("run %d: after gc: %d pack files, %d indexed, %d chunks nobody uses", run, len(packs), indexed, unused)
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("run %d: after gc: %v", run, err)
	}
	return st.OrphanFiles > 0
}
