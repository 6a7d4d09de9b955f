package session

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are gpud's Prometheus metrics about sessions and their workers.
// They are registered on the registry gpud passes in, never a global one.
type Metrics struct {
	workerStarts *prometheus.CounterVec
	workerExits  *prometheus.CounterVec
	checkpoint   *prometheus.HistogramVec

	// done accumulates the counters of sessions that have ended, so that
	// the totals never go down.
	doneCalls, doneIn, doneOut atomic.Uint64
	// sessions counts sessions by state at scrape time; set by the
	// Manager.
	sessions func() map[State]int
	// live sums the counters of live sessions at scrape time; set by the
	// Manager.
	live func() totals
}

// NewMetrics creates the metrics and registers them on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		workerStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_worker_starts_total",
			Help: "Worker processes started (start) or taken over after a restore or checkpoint (reattach).",
		}, []string{"how"}),
		workerExits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_worker_exits_total",
			Help: "Worker processes that ended, by reason.",
		}, []string{"reason"}),
		checkpoint: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpud_checkpoint_duration_seconds",
			Help:    "Duration of checkpoint, restore and migration steps.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"step"}),
	}
	if reg != nil {
		reg.MustRegister(m.workerStarts, m.workerExits, m.checkpoint, collector{m})
	}
	return m
}

// ObserveStep records how long a checkpoint, restore or migration step
// took, e.g. ObserveStep("dump", d).
func (m *Metrics) ObserveStep(step string, d time.Duration) {
	m.checkpoint.WithLabelValues(step).Observe(d.Seconds())
}

// totals are a session's traffic counters.
type totals struct{ calls, in, out, mem uint64 }

func (m *Metrics) addDone(t totals) {
	m.doneCalls.Add(t.calls)
	m.doneIn.Add(t.in)
	m.doneOut.Add(t.out)
}

var (
	sessionsDesc = prometheus.NewDesc("gpud_sessions", "Sessions on this host by state.", []string{"state"}, nil)
	callsDesc    = prometheus.NewDesc("gpud_calls_total", "Client requests executed by workers (highest sequence numbers), ended sessions included.", nil, nil)
	bytesDesc    = prometheus.NewDesc("gpud_client_bytes_total", "Bytes workers exchanged with clients, by direction.", []string{"direction"}, nil)
	memDesc      = prometheus.NewDesc("gpud_device_memory_in_use_bytes", "Device memory allocated by live sessions.", nil, nil)
)

// collector reads values that live in the Manager at scrape time.
type collector struct{ m *Metrics }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- callsDesc
	ch <- bytesDesc
	ch <- memDesc
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	var counts map[State]int
	if c.m.sessions != nil {
		counts = c.m.sessions()
	}
	for _, s := range States {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	var t totals
	if c.m.live != nil {
		t = c.m.live()
	}
	ch <- prometheus.MustNewConstMetric(callsDesc, prometheus.CounterValue, float64(t.calls+c.m.doneCalls.Load()))
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(t.in+c.m.doneIn.Load()), "in")
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(t.out+c.m.doneOut.Load()), "out")
	ch <- prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, float64(t.mem))
}
