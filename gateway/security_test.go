package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A server that starts redirecting in the middle of a gateway session is held to its
// redirect policy (here the default, Deny): the call fails and the other origin never
// sees a request, let alone the Secret header.
func TestARedirectDuringAGatewaySessionObeysTheRedirectPolicy(t *testing.T) {
	var elsewhere atomic.Int32
	capture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	t.Cleanup(capture.Close)

	h := newHarness(t, harnessOptions{})
	cs := h.connect(nil)
	if _, err := callText(t, cs, "echo", map[string]any{"text": "before"}); err != nil {
		t.Fatal(err)
	}
	h.upstream.redirectTo(capture.URL + "/mcp")
	_, err := callText(t, cs, "echo", map[string]any{"text": "after"})
	if err == nil {
		t.Fatal("a call the server redirected to another origin succeeded")
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the other origin received %d requests; want none", n)
	}
	testutil.Eventually(t, 5*time.Second, "the audit line of the failed call", func() error {
		if lines := h.audit.matching("Tool call", `"outcome"="upstream-error"`); len(lines) == 0 {
			return fmt.Errorf("none yet:\n%s", h.audit.all())
		}
		return nil
	})
}

// Header values, the caller's token and the URL's query string appear in no audit line,
// metric or error a client sees, whatever happens to the session.
func TestNothingSecretInAuditLinesMetricsOrErrors(t *testing.T) {
	const querySecret = "query-secret-5e2b"
	h := newHarness(t, harnessOptions{
		upstreamQuery: "?key=" + querySecret,
		server: func(obj *mcpv1alpha1.MCPServer) {
			obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
		},
	})
	cs := h.connect(nil)
	var errs []string
	if _, err := callText(t, cs, "echo", map[string]any{"text": "fine"}); err != nil {
		t.Fatal(err)
	}
	if _, err := callText(t, cs, "delete_all", nil); err != nil {
		errs = append(errs, err.Error())
	}
	// The server goes away mid-session.
	_ = h.upstream.Listener.Close()
	h.upstream.CloseClientConnections()
	if _, err := callText(t, cs, "echo", map[string]any{"text": "gone"}); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) != 2 {
		t.Fatalf("errors seen by the client: %q; want the refusal and the failure", errs)
	}

	var metrics bytes.Buffer
	families, err := h.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(&metrics, mf); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(metrics.String(), `switchboard_gateway_requests_total{method="tools/call",name="notes",namespace="team-a",outcome="denied"} 1`) {
		t.Errorf("metrics lack the denied call:\n%s", metrics.String())
	}
	places := map[string]string{"audit log": h.audit.all(), "metrics": metrics.String(), "client errors": strings.Join(errs, "\n")}
	for where, text := range places {
		for _, secret := range []string{upstreamSecret, "upstream-secret", callerToken, querySecret} {
			if strings.Contains(text, secret) {
				t.Errorf("%q leaked into the %s:\n%s", secret, where, text)
			}
		}
	}
}
