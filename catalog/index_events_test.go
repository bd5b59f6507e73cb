package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A tool that appears in status is searchable within a second, and one that disappears,
// or whose server is deleted, is gone as fast.
func TestIndexFollowsInformerEvents(t *testing.T) {
	c := startCatalog(t, catalog.AuthNone)
	ns := newNamespace(t)
	obj := createServer(t, ns, serverSpec{name: "growing", tools: []mcpv1alpha1.ToolInfo{tool("first", "", "")}})
	c.waitServers(t, "", ns, 1)

	searchWithin := func(q string, want int) {
		t.Helper()
		deadline := time.Now().Add(time.Second)
		for {
			var l catalog.ToolList
			c.getJSON(t, "", "/api/v1/tools?namespace="+ns+"&q="+q, &l)
			if len(l.Items) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("search %q: %d results after 1s, want %d", q, len(l.Items), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	obj.Status.Tools = append(obj.Status.Tools, tool("brand_new_capability", "", "Appeared later"))
	obj.Status.ToolCount = 2
	if err := k8sClient.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	searchWithin("brand", 1)
	searchWithin("appeared", 1)

	obj.Status.Tools = obj.Status.Tools[1:]
	obj.Status.ToolCount = 1
	if err := k8sClient.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	searchWithin("first", 0)

	if err := k8sClient.Delete(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	searchWithin("brand", 0)
	c.waitServers(t, "", ns, 0)
}

// Header values, Secret names and URL query strings never leave the catalogue, in any
// REST or MCP response.
func TestNoSecretsInResponses(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	secrets := []string{"inline-header-value-7d1f", "secret-name-9c2e", "secret-key-4b8a", "query-secret-55aa", "api_key"}
	createServer(t, ns, serverSpec{
		name:        "leaky",
		description: "A server with credentials",
		tools:       []mcpv1alpha1.ToolInfo{tool("search_things", "Search things", "Finds things")},
		mutate: func(o *mcpv1alpha1.MCPServer) {
			o.Spec.HTTP.URL = "https://leaky.example.com/mcp?api_key=query-secret-55aa"
			o.Spec.HTTP.Headers = []mcpv1alpha1.HTTPHeader{
				{Name: "X-Tenant", Value: "inline-header-value-7d1f"},
				{Name: "Authorization", ValueFrom: &mcpv1alpha1.HeaderValueSource{
					SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "secret-name-9c2e", Key: "secret-key-4b8a"},
				}},
			}
			// kubectl apply keeps the whole manifest in an annotation.
			manifest, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			o.Annotations = map[string]string{corev1.LastAppliedConfigAnnotation: string(manifest)}
		},
	})
	token := newCaller(t, ns, "agent", true)
	c.waitServers(t, token, ns, 1)

	var bodies []string
	for _, path := range []string{
		"/api/v1/servers",
		"/api/v1/servers?namespace=" + ns,
		"/api/v1/namespaces/" + ns + "/servers/leaky",
		"/api/v1/tools",
		"/api/v1/tools?q=search",
		"/api/v1/tools?q=leaky",
		"/api/v1/namespaces/" + ns + "/servers/missing",
		"/api/v1/servers?namespace=" + ns + "&labelSelector=%3D%3D",
	} {
		resp := c.get(t, token, path)
		if resp.code != http.StatusOK && resp.code != http.StatusNotFound && resp.code != http.StatusBadRequest {
			t.Fatalf("GET %s: %d", path, resp.code)
		}
		bodies = append(bodies, string(resp.body))
		for name, values := range resp.header {
			bodies = append(bodies, name+": "+strings.Join(values, ","))
		}
	}
	session := mcpSession(t, c, token)
	for _, call := range []struct {
		name string
		args map[string]any
	}{
		{"search_tools", map[string]any{"query": "search"}},
		{"search_tools", map[string]any{"query": ""}},
		{"list_servers", map[string]any{}},
		{"get_server", map[string]any{"namespace": ns, "name": "leaky"}},
		{"get_server", map[string]any{"namespace": ns, "name": "missing"}},
	} {
		res := callTool(t, session, call.name, call.args, nil)
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	var sawEndpoint bool
	for _, body := range bodies {
		for _, secret := range secrets {
			if strings.Contains(body, secret) {
				t.Errorf("response contains %q: %s", secret, body)
			}
		}
		sawEndpoint = sawEndpoint || strings.Contains(body, "https://leaky.example.com/mcp")
	}
	if !sawEndpoint {
		t.Error("the redacted status endpoint is never returned")
	}
}

// Condition messages are written for the MCPServer's owner and may name Secrets and keys
// (issue 12, finding 5); the catalogue serves each condition's type, status and reason
// with a fixed message for the reason instead, in every REST and MCP response.
func TestConditionMessagesNeverReachResponses(t *testing.T) {
	c := startCatalog(t, catalog.AuthTokenReview)
	ns := newNamespace(t)
	leak := `Secret "payments-stripe-live" has no key "api-key"`
	now := metav1.Now()
	createServer(t, ns, serverSpec{
		name:  "payments",
		tools: []mcpv1alpha1.ToolInfo{tool("charge_card", "Charge a card", "Charges a card")},
		conditions: []metav1.Condition{
			{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: mcpv1alpha1.ReasonSecretNotFound, Message: leak, LastTransitionTime: now},
			{Type: mcpv1alpha1.ConditionConnected, Status: metav1.ConditionFalse, Reason: mcpv1alpha1.ReasonSecretNotFound, Message: leak, LastTransitionTime: now},
			{Type: mcpv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "SomethingNew", Message: "token sk_live_51Hx9 rejected", LastTransitionTime: now},
		},
	})
	token := newCaller(t, ns, "agent", true)
	var detail catalog.ServerDetail
	testutil.Eventually(t, waitTimeout, "the server's three conditions", func() error {
		detail = catalog.ServerDetail{}
		resp := c.get(t, token, "/api/v1/namespaces/"+ns+"/servers/payments")
		if resp.code != http.StatusOK || json.Unmarshal(resp.body, &detail) != nil || len(detail.Conditions) != 3 {
			return fmt.Errorf("status %d, conditions %+v", resp.code, detail.Conditions)
		}
		return nil
	})

	// Reasons stay; messages are the catalogue's own.
	byType := map[string]catalog.Condition{}
	for _, cond := range detail.Conditions {
		byType[cond.Type] = cond
	}
	for _, want := range []struct{ typ, status, reason string }{
		{mcpv1alpha1.ConditionReady, "False", mcpv1alpha1.ReasonSecretNotFound},
		{mcpv1alpha1.ConditionConnected, "False", mcpv1alpha1.ReasonSecretNotFound},
		{mcpv1alpha1.ConditionStalled, "True", "SomethingNew"},
	} {
		got := byType[want.typ]
		if got.Status != want.status || got.Reason != want.reason || got.Message == "" || got.LastTransitionTime == "" {
			t.Errorf("condition %s = %+v, want status %s, reason %s and a message", want.typ, got, want.status, want.reason)
		}
	}
	if byType[mcpv1alpha1.ConditionReady].Message != byType[mcpv1alpha1.ConditionConnected].Message {
		t.Errorf("one reason, two messages: %q and %q", byType[mcpv1alpha1.ConditionReady].Message, byType[mcpv1alpha1.ConditionConnected].Message)
	}

	var bodies []string
	for _, path := range []string{
		"/api/v1/servers",
		"/api/v1/servers?namespace=" + ns,
		"/api/v1/namespaces/" + ns + "/servers/payments",
		"/api/v1/tools?q=charge",
	} {
		resp := c.get(t, token, path)
		if resp.code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.code)
		}
		bodies = append(bodies, string(resp.body))
	}
	session := mcpSession(t, c, token)
	for _, call := range []struct {
		name string
		args map[string]any
	}{
		{"get_server", map[string]any{"namespace": ns, "name": "payments"}},
		{"list_servers", map[string]any{"namespace": ns}},
		{"search_tools", map[string]any{"query": "charge"}},
	} {
		res := callTool(t, session, call.name, call.args, nil)
		if res.IsError {
			t.Fatalf("%s: %s", call.name, toolText(res))
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(b))
	}
	var sawReason bool
	for _, body := range bodies {
		for _, secret := range []string{"payments-stripe-live", "api-key", "sk_live_51Hx9"} {
			if strings.Contains(body, secret) {
				t.Errorf("response contains %q: %s", secret, body)
			}
		}
		sawReason = sawReason || strings.Contains(body, mcpv1alpha1.ReasonSecretNotFound)
	}
	if !sawReason {
		t.Error("no response carries the SecretNotFound reason")
	}
}
