package preempt

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/session"
)

func idList(cs []session.Candidate) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return strings.Join(out, ",")
}

func TestVictims(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	c := func(id string, prio int32, held uint64, active int) session.Candidate {
		return session.Candidate{ID: id, Priority: prio, Held: held, ActiveAt: at(active), Preemptible: true}
	}
	busy := c("busy", 0, 100, 0)
	busy.Preemptible = false // being checkpointed, or waiting for room itself
	cases := []struct {
		name  string
		prio  int32
		need  uint64
		cands []session.Candidate
		want  string // victims in order, or "!" for none with an error
	}{
		{"one lower session frees enough", 10, 50, []session.Candidate{c("a", 0, 100, 1)}, "a"},
		{"lowest priority first", 10, 50, []session.Candidate{c("a", 5, 100, 1), c("b", 1, 100, 9)}, "b"},
		{"least recently active among equals", 10, 50, []session.Candidate{c("a", 1, 100, 5), c("b", 1, 100, 2)}, "b"},
		{"as many as needed, in order", 10, 140, []session.Candidate{c("a", 1, 100, 5), c("b", 1, 100, 2), c("c", 0, 40, 9)}, "c,b"},
		{"stops once enough", 10, 40, []session.Candidate{c("a", 1, 100, 5), c("c", 0, 40, 9)}, "c"},
		{"equal priority never gives way", 10, 50, []session.Candidate{c("a", 10, 100, 1)}, "!"},
		{"higher priority never gives way", 10, 50, []session.Candidate{c("a", 11, 100, 1)}, "!"},
		{"not enough below: nothing is preempted", 10, 250, []session.Candidate{c("a", 1, 100, 1), c("b", 2, 100, 1), c("h", 20, 500, 1)}, "!"},
		{"a session that holds nothing is no help", 10, 50, []session.Candidate{c("a", 1, 0, 1)}, "!"},
		{"a busy session is skipped", 10, 50, []session.Candidate{busy, c("a", 3, 60, 1)}, "a"},
		{"negative priorities order too", 0, 10, []session.Candidate{c("a", -1, 100, 1), c("b", -5, 100, 9)}, "b"},
		{"ties broken by id", 10, 50, []session.Candidate{c("y", 1, 100, 1), c("x", 1, 100, 1)}, "x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Victims(tc.prio, tc.need, tc.cands)
			if tc.want == "!" {
				if err == nil || !errs.Is(err, errs.ResourceExhausted) || len(got) != 0 {
					t.Fatalf("Victims = %s, %v; want none and a resource-exhausted error", idList(got), err)
				}
				return
			}
			if err != nil || idList(got) != tc.want {
				t.Fatalf("Victims = %q, %v; want %q", idList(got), err, tc.want)
			}
		})
	}
}

func TestResumeOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c := func(id string, prio int32, held uint64, at int) session.Candidate {
		return session.Candidate{ID: id, Priority: prio, Held: held, ActiveAt: t0.Add(time.Duration(at) * time.Second)}
	}
	cases := []struct {
		name string
		free uint64
		list []session.Candidate
		want string
	}{
		{"nothing preempted", 100, nil, ""},
		{"fits", 100, []session.Candidate{c("a", 0, 100, 0)}, "a"},
		{"does not fit yet", 99, []session.Candidate{c("a", 0, 100, 0)}, ""},
		{"highest priority first", 150, []session.Candidate{c("a", 0, 100, 0), c("b", 5, 100, 3)}, "b"},
		{"both fit, in order", 200, []session.Candidate{c("a", 0, 100, 0), c("b", 5, 100, 3)}, "b,a"},
		{"longest preempted first among equals", 100, []session.Candidate{c("a", 1, 100, 5), c("b", 1, 100, 3)}, "b"},
		{"a smaller lower one does not jump the queue", 60, []session.Candidate{c("big", 9, 100, 0), c("small", 1, 10, 0)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := idList(ResumeOrder(tc.free, tc.list)); got != tc.want {
				t.Errorf("ResumeOrder = %q, want %q", got, tc.want)
			}
		})
	}
}
