package session

import (
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestTransitionTable(t *testing.T) {
	allowed := map[[2]State]bool{
		{Running, Detached}: true, {Running, Quiescing}: true, {Running, Stopped}: true,
		{Detached, Running}: true, {Detached, Stopped}: true, {Detached, Quiescing}: true,
		{Quiescing, Checkpointing}: true, {Quiescing, Running}: true, {Quiescing, Detached}: true, {Quiescing, Stopped}: true,
		{Checkpointing, Running}: true, {Checkpointing, Detached}: true, {Checkpointing, Migrating}: true, {Checkpointing, Stopped}: true,
		{Checkpointing, Preempted}: true, {Preempted, Stopped}: true,
		{Migrating, Stopped}: true, {Migrating, Running}: true, {Migrating, Detached}: true,
	}
	// Every pair, valid or not, including self-transitions.
	for _, from := range States {
		for _, to := range States {
			want := allowed[[2]State{from, to}]
			err := checkTransition("s-000000000001", from, to)
			if (err == nil) != want {
				t.Errorf("%s -> %s: err=%v, want allowed=%v", from, to, err, want)
			}
			if err != nil && !errs.IsFailedPrecondition(err) {
				t.Errorf("%s -> %s: error kind %s, want failed_precondition", from, to, errs.KindOf(err))
			}
		}
	}
	if State("bogus").Valid() {
		t.Error("unknown state is valid")
	}
	if _, err := parseState("running"); err != nil {
		t.Error(err)
	}
	if _, err := parseState("nope"); err == nil {
		t.Error("parsed an unknown state")
	}
}
