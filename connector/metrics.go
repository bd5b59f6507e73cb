package connector

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the connector's Prometheus series. Labels are the server's namespace and
// name, plus state or reason where the metric is about those; never a URL.
type metrics struct {
	sessions        *prometheus.GaugeVec
	probeSeconds    *prometheus.HistogramVec
	reconnectsTotal *prometheus.CounterVec
	discoveryErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "switchboard", Subsystem: "connector", Name: "sessions",
			Help: "Connector sessions by state: 1 for the state a server's session is in.",
		}, []string{"namespace", "name", "state"}),
		probeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "switchboard", Subsystem: "connector", Name: "probe_duration_seconds",
			Help:    "Latency of session health probes.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"namespace", "name"}),
		reconnectsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchboard", Subsystem: "connector", Name: "reconnects_total",
			Help: "Sessions rebuilt after an established session was lost.",
		}, []string{"namespace", "name"}),
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "switchboard", Subsystem: "connector", Name: "discovery_errors_total",
			Help: "Failed discoveries (tools, resources, prompts) by failure reason.",
		}, []string{"namespace", "name", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.sessions = register(reg, m.sessions, &err)
	m.probeSeconds = register(reg, m.probeSeconds, &err)
	m.reconnectsTotal = register(reg, m.reconnectsTotal, &err)
	m.discoveryErrors = register(reg, m.discoveryErrors, &err)
	return m, err
}

// register registers c, or returns the collector already registered under its name (a
// second pool on the same registry shares the series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}

func (m *metrics) setState(k Key, state State) {
	for _, s := range States {
		v := 0.0
		if s == state {
			v = 1
		}
		m.sessions.WithLabelValues(k.Namespace, k.Name, string(s)).Set(v)
	}
}

func (m *metrics) probed(k Key, d time.Duration) {
	m.probeSeconds.WithLabelValues(k.Namespace, k.Name).Observe(d.Seconds())
}

func (m *metrics) reconnects(k Key) {
	m.reconnectsTotal.WithLabelValues(k.Namespace, k.Name).Inc()
}

func (m *metrics) discoveryError(k Key, reason string) {
	m.discoveryErrors.WithLabelValues(k.Namespace, k.Name, reason).Inc()
}

// forget drops every series of a removed server.
func (m *metrics) forget(k Key) {
	labels := prometheus.Labels{"namespace": k.Namespace, "name": k.Name}
	m.sessions.DeletePartialMatch(labels)
	m.probeSeconds.DeletePartialMatch(labels)
	m.reconnectsTotal.DeletePartialMatch(labels)
	m.discoveryErrors.DeletePartialMatch(labels)
}
