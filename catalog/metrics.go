package catalog

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mcp/switchboard/identity"
)

// metrics are the catalogue's Prometheus collectors. Labels carry route names, status
// codes and cache names only: never a query, a namespace or a token.
type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	indexSize *prometheus.GaugeVec
	cache     *prometheus.CounterVec
	rejected  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_catalog_requests_total",
			Help: "Catalogue HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchboard_catalog_request_duration_seconds",
			Help:    "Catalogue HTTP request latency by route.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
		}, []string{"route"}),
		indexSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchboard_catalog_index_entries",
			Help: "Entries in the catalogue's search index by kind: servers, tools and tokens.",
		}, []string{"kind"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_catalog_auth_cache_lookups_total",
			Help: "Lookups in the catalogue's TokenReview (token) and SubjectAccessReview (access) caches by result.",
		}, []string{"cache", "result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchboard_catalog_auth_rejections_total",
			Help: "Catalogue requests turned away without a TokenReview: malformed tokens (401) and tokens beyond the concurrent review bound (429).",
		}, []string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.indexSize, m.cache, m.rejected} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("registering catalogue metrics: a catalogue is already registered: %w", err)
			}
			return nil, fmt.Errorf("registering catalogue metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) setIndexSize(servers, tools, tokens int) {
	m.indexSize.WithLabelValues("servers").Set(float64(servers))
	m.indexSize.WithLabelValues("tools").Set(float64(tools))
	m.indexSize.WithLabelValues("tokens").Set(float64(tokens))
}

func (m *metrics) authCache(name string, hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	m.cache.WithLabelValues(name, result).Inc()
}

// authOutcome counts what one authentication did: a token cache hit or miss, or a
// rejection without a review.
func (m *metrics) authOutcome(o identity.AuthOutcome) {
	switch o {
	case identity.AuthCached:
		m.authCache("token", true)
	case identity.AuthReviewed:
		m.authCache("token", false)
	default:
		m.rejected.WithLabelValues(string(o)).Inc()
	}
}

// instrument wraps h to count its requests and time them under route.
func (m *metrics) instrument(route string, h http.Handler) http.Handler {
	latency := m.latency.WithLabelValues(route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		latency.Observe(time.Since(start).Seconds())
		m.requests.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
	})
}

// statusWriter records the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets streaming responses (MCP over server-sent events) through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter {
	return w.ResponseWriter
}

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
