package connector

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// breakable answers 503 to everything while broken and counts session handshakes.
type breakable struct {
	broken     atomic.Bool
	handshakes atomic.Int64
	next       http.Handler
	log        headerLog
}

func (b *breakable) handler() http.Handler {
	count := func(w http.ResponseWriter, r *http.Request, _ json.RawMessage) {
		b.handshakes.Add(1)
		b.next.ServeHTTP(w, r)
	}
	inner := intercept(intercept(b.next, "initialize", count), "server/discover", count)
	return b.log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.broken.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	}))
}

func TestProbesMarkDownAndSessionRecovers(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts *mcp.StreamableHTTPOptions
		srv  *mcp.ServerOptions
		want string
	}{
		{"ping at 2025-11-25", nil, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}, "2025-11-25"},
		{"server/discover at 2026-07-28", &mcp.StreamableHTTPOptions{Stateless: true}, nil, "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &breakable{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, tc.srv) }, tc.opts)}
			ts := startServer(t, b.handler())
			reg := prometheus.NewRegistry()
			p := testPool(t, func(o *Options) { o.Registerer = reg })
			key := Key{"ns", "flaky"}
			cfg := fastConfig(ts.URL)
			cfg.HealthCheck = HealthCheck{Interval: 30 * time.Millisecond, FailureThreshold: 3}
			p.Ensure(key, cfg)
			first := waitReady(t, p, key)
			if first.ProtocolVersion != tc.want {
				t.Fatalf("protocol version = %s, want %s", first.ProtocolVersion, tc.want)
			}
			handshakes := b.handshakes.Load()
			drainEvents(p)

			// Probes go on while healthy and touch the network in both eras, and a
			// healthy probe tells the controller nothing.
			// A probe may be in flight at the baseline, its request counted but not its
			// duration: four finished probes include at least three whole new ones.
			requests, probes := b.log.count(), histogramCount(t, reg)
			waitFor(t, p, key, "probes", func(Snapshot) bool { return histogramCount(t, reg) >= probes+4 })
			if b.log.count() < requests+3 {
				t.Errorf("3 probes made %d requests", b.log.count()-requests)
			}
			select {
			case ev := <-p.Events():
				t.Errorf("healthy probes produced event %v", ev)
			default:
			}
			if b.handshakes.Load() != handshakes && tc.want == "2025-11-25" {
				t.Errorf("healthy probes re-initialized the session")
			}

			b.broken.Store(true)
			down := waitDown(t, p, key, ReasonProtocolError)
			if down.ConsecutiveFailures < 3 || !strings.Contains(down.LastError.Message, "503") {
				t.Errorf("down after %d failures with %v", down.ConsecutiveFailures, down.LastError)
			}
			if !down.LastError.Transient {
				t.Errorf("a server answering 503 for maintenance is reported as a failure that needs a change: %v", down.LastError)
			}

			b.broken.Store(false)
			back := waitReady(t, p, key)
			if back.ConsecutiveFailures != 0 || back.LastError != nil {
				t.Errorf("recovered session reports %d failures, %v", back.ConsecutiveFailures, back.LastError)
			}
			if got := testutil.ToFloat64(p.metrics.reconnectsTotal.WithLabelValues("ns", "flaky")); got < 1 {
				t.Errorf("reconnects_total = %v, want >= 1", got)
			}
			if got := testutil.ToFloat64(p.metrics.sessions.WithLabelValues("ns", "flaky", "Ready")); got != 1 {
				t.Errorf("sessions{state=Ready} = %v, want 1", got)
			}
		})
	}
}

func histogramCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "switchboard_connector_probe_duration_seconds" {
			var n uint64
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	return 0
}

func TestEnsureIsIdempotent(t *testing.T) {
	b := &breakable{next: statelessHandler(newServer(2, nil))}
	ts := startServer(t, b.handler())
	p := testPool(t)
	key := Key{"ns", "same"}
	cfg := fastConfig(ts.URL)
	cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer one"}}
	p.Ensure(key, cfg)
	waitReady(t, p, key)
	handshakes := b.handshakes.Load()
	drainEvents(p)

	for range 5 {
		again := cfg
		again.Headers = slices.Clone(cfg.Headers)
		p.Ensure(key, again)
	}
	select {
	case ev := <-p.Events():
		t.Errorf("unchanged config produced event %v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	if got := b.handshakes.Load(); got != handshakes {
		t.Errorf("unchanged config reconnected: %d handshakes, want %d", got, handshakes)
	}
}

func TestConfigChangeReplacesSessionWithoutGap(t *testing.T) {
	b := &breakable{next: statelessHandler(newServer(2, nil))}
	serverA := startServer(t, b.handler())
	serverB := serveStreamable(t, newServer(5, nil), nil)
	p := testPool(t)
	key := Key{"ns", "moving"}
	cfgA := fastConfig(serverA.URL)
	cfgA.Headers = []Header{{Name: "Authorization", Value: "Bearer old"}}
	p.Ensure(key, cfgA)
	waitReady(t, p, key)

	// Rotated header: a new session that sends the new value.
	cfgA2 := cfgA
	cfgA2.Headers = []Header{{Name: "Authorization", Value: "Bearer new"}}
	p.Ensure(key, cfgA2)
	waitFor(t, p, key, "rotated header in use", func(Snapshot) bool {
		return slices.Contains(b.log.values("Authorization"), "Bearer new")
	})
	drainEvents(p)

	// New URL: every snapshot on the way is either the old server's or the new one's,
	// Ready throughout, and an event announces the switch.
	p.Ensure(key, fastConfig(serverB.URL))
	deadline := time.Now().Add(waitTimeout)
	for {
		snap, ok := p.Snapshot(key)
		if !ok || snap.State != StateReady {
			t.Fatalf("gap during replacement: ok=%v state=%s", ok, snap.State)
		}
		if len(snap.Tools) == 5 {
			if snap.Endpoint != DisplayURL(serverB.URL) {
				t.Errorf("endpoint = %s, want %s", snap.Endpoint, DisplayURL(serverB.URL))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replacement session never took over")
		}
		time.Sleep(time.Millisecond)
	}
	nextEvent(t, p, key)
}

func TestEgressDeciderSwapDropsDeniedSession(t *testing.T) {
	p := testPool(t, func(o *Options) { o.InitialBackoff = time.Minute })
	key := Key{"ns", "policy"}
	cfg := fastConfig(serveStreamable(t, newServer(1, nil), nil).URL)
	p.Ensure(key, cfg)
	waitReady(t, p, key)

	cfg.Egress = denyAll{}
	p.Ensure(key, cfg)
	snap := waitDown(t, p, key, ReasonEgressDenied)
	if !strings.Contains(snap.LastError.Message, "policy ns/lockdown") {
		t.Errorf("message %q does not name the policy", snap.LastError.Message)
	}
}

func TestRemoveForgetsServer(t *testing.T) {
	var deletes atomic.Int64
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		return newServer(1, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	}, nil)
	ts := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
		}
		inner.ServeHTTP(w, r)
	}))
	reg := prometheus.NewRegistry()
	p := testPool(t, func(o *Options) { o.Registerer = reg })
	key := Key{"ns", "gone"}
	p.Ensure(key, fastConfig(ts.URL))
	waitReady(t, p, key)

	p.Remove(key)
	if _, ok := p.Snapshot(key); ok {
		t.Error("snapshot still present after Remove")
	}
	deadline := time.Now().Add(waitTimeout)
	for deletes.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if deletes.Load() == 0 {
		t.Error("session was not closed on the server (no DELETE)")
	}
	if n := testutil.CollectAndCount(reg, "switchboard_connector_sessions"); n != 0 {
		t.Errorf("%d session series left after Remove", n)
	}
}

func TestMetricsCarryNoURL(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := testPool(t, func(o *Options) { o.Registerer = reg })
	okKey, badKey := Key{"ns", "ok"}, Key{"ns", "bad"}
	p.Ensure(okKey, fastConfig(serveStreamable(t, newServer(1, nil), nil).URL+"?token=abc"))
	bad := startServer(t, intercept(statelessHandler(newServer(1, nil)), "tools/list", func(w http.ResponseWriter, _ *http.Request, id json.RawMessage) {
		writeResult(w, id, `{"tools":[],"nextCursor":"again"}`)
	}))
	p.Ensure(badKey, fastConfig(bad.URL))
	waitReady(t, p, okKey)
	waitDown(t, p, badKey, ReasonLimitExceeded)

	if got := testutil.ToFloat64(p.metrics.discoveryErrors.WithLabelValues("ns", "bad", ReasonLimitExceeded)); got < 1 {
		t.Errorf("discovery_errors_total{reason=LimitExceeded} = %v", got)
	}
	if got := testutil.ToFloat64(p.metrics.sessions.WithLabelValues("ns", "bad", "Down")); got != 1 {
		t.Errorf("sessions{state=Down} = %v", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace", "name", "state", "reason":
				default:
					t.Errorf("%s has unexpected label %s", f.GetName(), l.GetName())
				}
				if strings.Contains(l.GetValue(), "://") || strings.Contains(l.GetValue(), "token") {
					t.Errorf("%s label %s=%q looks like a URL", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("metric lint: %v %v", problems, err)
	}
}
