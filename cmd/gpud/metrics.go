package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/api"
)

// opsMetrics are gpud's metrics for the operations view
// (deploy/grafana): migrations, the store, and the cluster registry.
type opsMetrics struct {
	downtime  prometheus.Histogram
	sent      prometheus.Counter
	storeSize prometheus.Gauge
	connected prometheus.Gauge
	hosts     *prometheus.GaugeVec
	owned     prometheus.Gauge
	fenced    prometheus.Counter
}

// newOpsMetrics creates them and registers them on reg.
func newOpsMetrics(reg prometheus.Registerer) *opsMetrics {
	m := &opsMetrics{
		downtime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpud_migration_downtime_seconds",
			Help:    "Client-visible stall of migrations from this host: quiesce to the moved notice.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12)}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_migration_sent_bytes_total",
			Help: "Image bytes this host pushed to migration targets (chunks they lacked)."}),
		storeSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpud_store_bytes",
			Help: "Size of the chunk store's packs on disk (updated with the registry's live record)."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpud_registry_connected",
			Help: "1 while this host's registry lease is renewed, 0 while the registry is unreachable (a host with --registry)."}),
		hosts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpud_registry_hosts",
			Help: "Hosts in the cluster registry by state (up, down), as this host last read them."}, []string{"state"}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpud_registry_owned_sessions",
			Help: "Sessions the registry records as owned by this host."}),
		fenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_registry_fenced_total",
			Help: "Restores, ownership changes and live sessions refused or ended because another host owns the session or the token was stale."}),
	}
	if reg != nil {
		reg.MustRegister(m.downtime, m.sent, m.storeSize, m.connected, m.hosts, m.owned, m.fenced)
	}
	return m
}

// migrated records a finished migration.
func (m *opsMetrics) migrated(res *api.MigrateReply) {
	m.downtime.Observe(float64(res.DowntimeMS) / 1000)
	m.sent.Add(float64(res.SentBytes))
}
