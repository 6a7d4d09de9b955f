package server

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the listener's Prometheus metrics. They are registered on
// the registry gpud passes in, never a global one; package session has the
// metrics of the sessions themselves.
type Metrics struct {
	connections *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them on reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_connections_total",
			Help: "Client connections by handshake outcome.",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.connections)
	}
	return m
}
