package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuctl/gpuctl/remoting/wire"
)

// counter returns the value of one counter sample by family name and
// label pair, or -1.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label, value) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	ts := startServerWith(t, time.Minute, NewMetrics(reg))
	cl, err := dial(t, ts.addr, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := dial(t, ts.addr, wire.Hello{Token: "wrong"}); err == nil {
		t.Fatal("wrong token accepted")
	}
	// The client has its Welcome (written by the session) a moment before
	// the listener counts the connection: give the count that moment.
	for _, tc := range []struct {
		result string
		want   float64
	}{{"new", 1}, {"bad_token", 1}, {"resumed", 0}} {
		got := counter(t, reg, "gpud_connections_total", "result", tc.result)
		for deadline := time.Now().Add(5 * time.Second); got != tc.want && tc.want != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			got = counter(t, reg, "gpud_connections_total", "result", tc.result)
		}
		if got != tc.want && !(tc.want == 0 && got == -1) {
			t.Errorf("gpud_connections_total{result=%q} = %v, want %v", tc.result, got, tc.want)
		}
	}
}
