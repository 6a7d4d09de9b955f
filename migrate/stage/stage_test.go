package stage

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/store"
)

func digest(b byte) store.Digest {
	var d store.Digest
	d[0] = b
	return d
}

func TestKeepTakeRelease(t *testing.T) {
	s := &Stager{Max: 3 << 10}
	keep := s.Keep("s-0123456789ab")
	a := bytes.Repeat([]byte{1}, 1<<10)
	keep(digest(1), a)
	a[0] = 9 // the stager copied it
	keep(digest(1), a)
	keep(digest(2), bytes.Repeat([]byte{2}, 1<<10))
	keep(digest(3), bytes.Repeat([]byte{3}, 2<<10)) // over the bound
	if got := s.Used(); got != 2<<10 {
		t.Fatalf("used %d bytes, want %d", got, 2<<10)
	}
	if s.Keep("not a session") != nil {
		t.Error("a malformed session id got a staging")
	}
	g := s.Take("s-0123456789ab")
	if g == nil {
		t.Fatal("nothing to take")
	}
	if s.Take("s-0123456789ab") != nil {
		t.Error("taken twice")
	}
	n, b, skipped := g.Stats()
	if n != 2 || b != 2<<10 || skipped != 1 {
		t.Errorf("stats %d chunks, %d bytes, %d skipped; want 2, %d, 1", n, b, skipped, 2<<10)
	}
	if got := g.Get(digest(1)); len(got) != 1<<10 || got[0] != 1 {
		t.Errorf("chunk 1 reads %d bytes starting %v", len(got), got[:1])
	}
	if g.Get(digest(3)) != nil {
		t.Error("the chunk over the bound was staged")
	}
	keep(digest(4), []byte{4}) // a late chunk for a taken group
	if g.Get(digest(4)) != nil {
		t.Error("a taken group took another chunk")
	}
	g.Release()
	g.Release()
	if got := s.Used(); got != 0 {
		t.Errorf("after release %d bytes staged, want 0", got)
	}
	var nilGroup *Group
	nilGroup.Release()
	if nilGroup.Get(digest(1)) != nil {
		t.Error("a nil group holds a chunk")
	}
}

func TestZeroBoundStagesNothing(t *testing.T) {
	s := &Stager{}
	s.Keep("s-0123456789ab")(digest(1), []byte{1})
	g := s.Take("s-0123456789ab")
	defer g.Release()
	if n, _, skipped := g.Stats(); n != 0 || skipped != 1 {
		t.Errorf("%d chunks staged, %d skipped; want 0 and 1", n, skipped)
	}
}

func TestIdleStagingIsDropped(t *testing.T) {
	s := &Stager{Max: 1 << 20, Idle: 50 * time.Millisecond}
	s.Keep("s-0123456789ab")(digest(1), []byte{1, 2, 3})
	deadline := time.Now().Add(5 * time.Second)
	for s.Used() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still staged after the idle time", s.Used())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Take("s-0123456789ab") != nil {
		t.Error("an expired staging could still be taken")
	}
}

func TestDropRoute(t *testing.T) {
	s := &Stager{Max: 1 << 20}
	mux := http.NewServeMux()
	s.Register(mux)
	s.Keep("s-0123456789ab")(digest(1), []byte{1})
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{api.StagedChunksSessionPath("s-0123456789ab"), http.StatusOK, `{"dropped":true}`},
		{api.StagedChunksSessionPath("s-0123456789ab"), http.StatusOK, `{"dropped":false}`},
		{api.StagedChunksSessionPath("bad id"), http.StatusBadRequest, ""},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("DELETE %s: status %d, want %d (%s)", tc.path, rec.Code, tc.code, rec.Body)
		}
		if tc.body != "" && !bytes.Contains(rec.Body.Bytes(), []byte(tc.body)) {
			t.Errorf("DELETE %s: body %s, want %s", tc.path, rec.Body, tc.body)
		}
	}
	if s.Used() != 0 {
		t.Errorf("%d bytes staged after the drop", s.Used())
	}
}
