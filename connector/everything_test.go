package connector

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

func TestServerEverything(t *testing.T) {
	for _, tc := range []struct {
		mode, path    string
		protocol      Protocol
		wantTransport Transport
	}{
		{"streamableHttp", "/mcp", ProtocolAuto, TransportStreamableHTTP},
		{"sse", "/sse", ProtocolAuto, TransportSSE},
		{"sse", "/sse", ProtocolSSE, TransportSSE},
	} {
		t.Run(fmt.Sprintf("%s %s", tc.mode, tc.protocol), func(t *testing.T) {
			base := testenv.StartServerEverything(t, tc.mode)
			reg := prometheus.NewRegistry()
			p := testPool(t, func(o *Options) { o.Registerer = reg })
			key := Key{"ns", "everything"}
			cfg := fastConfig(base + tc.path)
			cfg.Protocol = tc.protocol
			cfg.Timeout, cfg.ConnectTimeout = 10*time.Second, 10*time.Second
			cfg.HealthCheck = HealthCheck{Interval: 100 * time.Millisecond, FailureThreshold: 2}
			p.Ensure(key, cfg)
			snap := waitReady(t, p, key)
			if snap.Transport != tc.wantTransport {
				t.Errorf("transport = %s, want %s", snap.Transport, tc.wantTransport)
			}
			if !hasTool(snap, "echo") {
				t.Errorf("tool echo missing from %v", toolNames(snap))
			}
			if len(snap.Resources) == 0 || len(snap.Prompts) == 0 {
				t.Errorf("got %d resources and %d prompts, want some of each", len(snap.Resources), len(snap.Prompts))
			}
			t.Logf("%s: %s %s, %d tools, %d resources, %d templates, %d prompts", tc.mode, snap.Transport,
				snap.ProtocolVersion, len(snap.Tools), len(snap.Resources), len(snap.ResourceTemplates), len(snap.Prompts))

			// Three probes later the session is still the same, healthy one.
			connected := snap.ConnectedAt
			after := waitFor(t, p, key, "three probes", func(Snapshot) bool { return histogramCount(t, reg) >= 3 })
			if !after.ConnectedAt.Equal(connected) || after.ConsecutiveFailures != 0 {
				t.Errorf("probes disturbed a healthy session: reconnected=%v failures=%d err=%v",
					!after.ConnectedAt.Equal(connected), after.ConsecutiveFailures, after.LastError)
			}
		})
	}
}

func hasTool(s Snapshot, name string) bool {
	for _, t := range s.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
