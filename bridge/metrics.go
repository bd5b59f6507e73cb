package bridge

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are the bridge's Prometheus metrics, served at /metrics on its own listener.
// Each Bridge has a registry of its own: one process runs one bridge, and tests run many.
type metrics struct {
	registry  *prometheus.Registry
	evictions prometheus.Counter
	refused   prometheus.Counter
}

func newMetrics(b *Bridge) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_bridge_evictions_total",
			Help: "Sessions ended to make room for a new session at --max-sessions: the least recently used session with no request in flight.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchboard_bridge_refused_sessions_total",
			Help: "New sessions refused with HTTP 503 because every session had a request in flight.",
		}),
	}
	sessions := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchboard_bridge_sessions",
		Help: "Live client sessions.",
	}, func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return float64(len(b.sessions))
	})
	limit := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchboard_bridge_max_sessions",
		Help: "The session limit (--max-sessions).",
	}, func() float64 { return float64(b.opts.MaxSessions) })
	m.registry.MustRegister(sessions, limit, m.evictions, m.refused)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
