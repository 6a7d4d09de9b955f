package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuctl/gpuctl/remoting/wire"
)

// gathered returns the value of one sample: family name and label pairs.
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
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
	met := ts.m.cfg.Metrics

	cl, err := dial(t, ts.addr, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, _ := cl.PrimaryCtxRetain(0)
	if _, err := cl.MemAlloc(c, 3<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, ts.addr, wire.Hello{Token: "wrong"}); err == nil {
		t.Fatal("wrong token accepted")
	}
	met.ObserveStep("dump", 250*time.Millisecond)
	for _, tc := range []struct {
		name   string
		labels []string
		check  func(float64) bool
	}{
		{"gpud_sessions", []string{"state", "running"}, func(v float64) bool { return v == 1 }},
		{"gpud_sessions", []string{"state", "detached"}, func(v float64) bool { return v == 0 }},
		{"gpud_connections_total", []string{"result", "new"}, func(v float64) bool { return v == 1 }},
		{"gpud_connections_total", []string{"result", "bad_token"}, func(v float64) bool { return v == 1 }},
		{"gpud_calls_total", nil, func(v float64) bool { return v == 2 }},
		{"gpud_client_bytes_total", []string{"direction", "in"}, func(v float64) bool { return v > 0 }},
		{"gpud_device_memory_in_use_bytes", nil, func(v float64) bool { return v == 3<<20 }},
	} {
		if v := gathered(t, reg, tc.name, tc.labels...); !tc.check(v) {
			t.Errorf("%s%v = %v", tc.name, tc.labels, v)
		}
	}
	fams, _ := reg.Gather()
	found := false
	for _, f := range fams {
		if f.GetName() == "gpud_checkpoint_duration_seconds" && f.GetMetric()[0].GetHistogram().GetSampleCount() == 1 {
			found = true
		}
	}
	if !found {
		t.Error("checkpoint step duration not observed")
	}
}
