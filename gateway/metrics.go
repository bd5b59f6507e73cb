package gateway

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mcp/switchboard/connector"
)

// Outcomes of a relayed call, the audit log's and the metrics' outcome label.
const (
	outcomeOK            = "ok"
	outcomeToolError     = "tool-error"
	outcomeDenied        = "denied"
	outcomeUpstreamError = "upstream-error"
)

// knownMethods are the client-to-server methods the metrics name; any other is "other",
// so that a client cannot grow the label set.
var knownMethods = map[string]bool{
	"initialize": true, "ping": true,
	"tools/list": true, "tools/call": true,
	"resources/list": true, "resources/read": true, "resources/templates/list": true,
	"resources/subscribe": true, "resources/unsubscribe": true,
	"prompts/list": true, "prompts/get": true,
	"completion/complete": true, "logging/setLevel": true,
	"tasks/get": true, "tasks/list": true, "tasks/result": true, "tasks/cancel": true,
}

func methodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}

// metrics are the gateway's Prometheus metrics. Server labels are set only once a caller
// was authorized for an existing server, so unauthenticated traffic cannot add series.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	sessions *prometheus.GaugeVec
	toolsets *prometheus.GaugeVec // open toolset sessions, by toolset
	refused  *prometheus.CounterVec
	listens  prometheus.Gauge // open subscriptions/listen streams
	// policyDecisions counts the access policy decisions of requests to targets some
	// MCPAccessPolicy selects, by effect and enforcement (Enforce, or Audit for what an
	// Audit policy would have decided): bounded labels, no tool, caller or policy.
	policyDecisions *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_gateway_requests_total",
			Help: "JSON-RPC calls relayed by the gateway, by server, method and outcome (ok, tool-error, denied, upstream-error).",
		}, []string{"namespace", "name", "method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_gateway_request_duration_seconds",
			Help:    "Time from a call reaching the gateway to its answer leaving it, by server and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"namespace", "name", "method"}),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_gateway_sessions",
			Help: "Open gateway sessions on this replica, by server.",
		}, []string{"namespace", "name"}),
		toolsets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_gateway_toolset_sessions",
			Help: "Open gateway sessions on this replica, by MCPToolset.",
		}, []string{"namespace", "name"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_gateway_refused_requests_total",
			Help: "HTTP requests the gateway refused before relaying, by status code.",
		}, []string{"code"}),
		listens: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchboard_gateway_listen_streams",
			Help: "Open subscriptions/listen streams of sessionless clients on this replica, of servers and toolsets together.",
		}),
		policyDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_gateway_policy_decisions_total",
			Help: "Access policy decisions of requests to servers and toolsets an MCPAccessPolicy selects, by effect (Allow, RequireApproval, Deny) and enforcement (Enforce; Audit for what Audit policies would have decided).",
		}, []string{"effect", "enforcement"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.sessions, m.toolsets, m.refused, m.listens, m.policyDecisions} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) call(key connector.Key, method, outcome string, took time.Duration) {
	method = methodLabel(method)
	m.requests.WithLabelValues(key.Namespace, key.Name, method, outcome).Inc()
	if took >= 0 {
		m.duration.WithLabelValues(key.Namespace, key.Name, method).Observe(took.Seconds())
	}
}

func (m *metrics) sessionOpened(key connector.Key) {
	m.sessions.WithLabelValues(key.Namespace, key.Name).Inc()
}

func (m *metrics) sessionClosed(key connector.Key) {
	m.sessions.WithLabelValues(key.Namespace, key.Name).Dec()
}

// forget drops the series of a deleted server.
func (m *metrics) forget(key connector.Key) {
	labels := prometheus.Labels{"namespace": key.Namespace, "name": key.Name}
	m.requests.DeletePartialMatch(labels)
	m.duration.DeletePartialMatch(labels)
	m.sessions.DeletePartialMatch(labels)
}
