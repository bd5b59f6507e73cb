package gateway_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// otherNamespace is a second tenant's namespace in the quota tests.
const otherNamespace = "team-b"

// Tokens of the quota tests' callers: alice and carol use team-a's servers and
// toolsets, bob team-b's.
const (
	aliceToken = "alice-token"
	bobToken   = "bob-token"
	carolToken = "carol-token"
)

// tenants is a gateway with a server (notes) and a toolset (over notes) in each of two
// namespaces, team-a and team-b, and three authenticated callers allowed to use all of
// them.
type tenants struct {
	*harness
}

func newTenants(t *testing.T, opts func(*gateway.Options), server func(*mcpv1alpha1.MCPServer)) *tenants {
	t.Helper()
	allowed := fake.NewClientset()
	allowed.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	h := newHarness(t, harnessOptions{server: server, gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{aliceToken: "alice", bobToken: "bob", carolToken: "carol"}
		o.Access = allowed.AuthorizationV1().SubjectAccessReviews()
		if opts != nil {
			opts(o)
		}
	}})
	// team-b's notes is the same upstream under another name.
	other := connector.Key{Namespace: otherNamespace, Name: "notes"}
	h.pool.Ensure(other, h.config(loopbackRules(t)))
	testutil.Eventually(t, 10*time.Second, "team-b's notes session to become ready", func() error {
		if snap, _ := h.pool.Snapshot(other); snap.State != connector.StateReady {
			return fmt.Errorf("state %s", snap.State)
		}
		return nil
	})
	obj := readyServer(other)
	if server != nil {
		server(obj)
	}
	h.gw.Update(obj)
	for _, ns := range []string{namespace, otherNamespace} {
		h.gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "helpdesk", Generation: 1},
			Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "notes"}}},
		})
	}
	return &tenants{h}
}

// endpoint is a kind of gateway endpoint: a server's or a toolset's.
type endpoint struct {
	kind string
	path func(namespace string) string
}

var endpoints = []endpoint{
	{"server", func(ns string) string { return gatewaypath.Server(ns, "notes") }},
	{"toolset", func(ns string) string { return gatewaypath.Toolset(ns, "helpdesk") }},
}

// url is the gateway URL of an endpoint in a namespace.
func (ts *tenants) url(e endpoint, ns string) string { return ts.front.URL + e.path(ns) }

// fill opens sessions as the caller until the gateway refuses one, at most limit, and
// returns how many it opened and the refusal.
func (ts *tenants) fill(t *testing.T, url, token string, limit int) (int, answer) {
	t.Helper()
	for opened := range limit {
		resp := initialize(t, url, token)
		if resp.status != http.StatusOK {
			return opened, resp
		}
	}
	return limit, answer{}
}

// One caller filling the replica's sessions must leave room for a caller of another
// namespace: the caller opened every session of a replica (--gateway-max-sessions
// 16) in 130 ms, and the next caller, in another namespace, got 503.
func TestOneCallerCannotTakeEverySessionOfTheReplica(t *testing.T) {
	for _, e := range endpoints {
		t.Run(e.kind, func(t *testing.T) {
			ts := newTenants(t, func(o *gateway.Options) { o.MaxSessions = 16 }, nil)
			opened, refusal := ts.fill(t, ts.url(e, namespace), aliceToken, 16)
			if opened >= 16 {
				t.Errorf("alice opened all %d sessions of the replica", opened)
			} else if refusal.status != http.StatusServiceUnavailable {
				t.Errorf("alice's refusal: status %d; want 503", refusal.status)
			}
			if resp := initialize(t, ts.url(e, otherNamespace), bobToken); resp.status != http.StatusOK {
				t.Errorf("after alice opened %d sessions, bob (team-b) got %d: %s", opened, resp.status, resp.body)
			}
		})
	}
}

// A caller's quota refuses its sessions beyond it, of servers and toolsets alike, with
// 503 naming the limit, while another caller still opens one.
func TestACallerBeyondItsQuotaIsRefusedAndOthersAreNot(t *testing.T) {
	cases := []struct {
		name   string
		opts   func(*gateway.Options)
		server func(*mcpv1alpha1.MCPServer)
		// endpoints are those the case fills; want names the limit in the refusal.
		endpoints []endpoint
		quota     int
		want      string
	}{
		{name: "flag, server sessions", opts: func(o *gateway.Options) { o.MaxSessionsPerCaller = 3 },
			endpoints: endpoints[:1], quota: 3, want: "--gateway-max-sessions-per-caller"},
		{name: "flag, toolset sessions", opts: func(o *gateway.Options) { o.MaxSessionsPerCaller = 3 },
			endpoints: endpoints[1:], quota: 3, want: "--gateway-max-sessions-per-caller"},
		{name: "flag, both kinds together", opts: func(o *gateway.Options) { o.MaxSessionsPerCaller = 3 },
			endpoints: endpoints, quota: 3, want: "--gateway-max-sessions-per-caller"},
		{name: "spec.gateway.maxSessionsPerCaller", server: func(obj *mcpv1alpha1.MCPServer) {
			obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{MaxSessionsPerCaller: 2}
		}, endpoints: endpoints[:1], quota: 2, want: "spec.gateway.maxSessionsPerCaller"},
		{name: "spec.gateway.maxSessionsPerCaller cannot raise the flag", opts: func(o *gateway.Options) { o.MaxSessionsPerCaller = 2 },
			server: func(obj *mcpv1alpha1.MCPServer) {
				obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{MaxSessionsPerCaller: 50}
			}, endpoints: endpoints[:1], quota: 2, want: "--gateway-max-sessions-per-caller"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTenants(t, tc.opts, tc.server)
			opened := 0
			var refusal answer
			// Alternate the endpoints, so that a quota over both kinds is filled by both.
			for refusal.status == 0 && opened <= tc.quota {
				resp := initialize(t, ts.url(tc.endpoints[opened%len(tc.endpoints)], namespace), aliceToken)
				if resp.status != http.StatusOK {
					refusal = resp
					break
				}
				opened++
			}
			if opened != tc.quota {
				t.Fatalf("alice opened %d sessions before a refusal (%d %s); want %d", opened, refusal.status, refusal.body, tc.quota)
			}
			if refusal.status != http.StatusServiceUnavailable || refusal.header.Get("Retry-After") == "" {
				t.Errorf("refusal: status %d, Retry-After %q; want 503 with Retry-After", refusal.status, refusal.header.Get("Retry-After"))
			}
			if !strings.Contains(refusal.body, tc.want) || !strings.Contains(refusal.body, "alice") {
				t.Errorf("refusal %s; want a JSON-RPC error naming alice and %s", refusal.body, tc.want)
			}
			// Another caller, of the same namespace and of another, is not held back.
			for _, other := range []struct{ token, namespace string }{{carolToken, namespace}, {bobToken, otherNamespace}} {
				if resp := initialize(t, ts.url(tc.endpoints[0], other.namespace), other.token); resp.status != http.StatusOK {
					t.Errorf("%s in %s: status %d %s; want a session", other.token, other.namespace, resp.status, resp.body)
				}
			}
		})
	}
}

// The servers and toolsets of one namespace hold at most their share of the replica's
// sessions, however many callers use them; another namespace's callers still get in.
func TestOneNamespaceCannotTakeMoreThanItsShare(t *testing.T) {
	// 12 sessions a replica: a namespace's share is a quarter, 3.
	ts := newTenants(t, func(o *gateway.Options) { o.MaxSessions = 12 }, nil)
	opened := 0
	var refusal answer
	for _, token := range []string{aliceToken, carolToken} {
		for _, e := range endpoints {
			resp := initialize(t, ts.url(e, namespace), token)
			if resp.status != http.StatusOK {
				refusal = resp
				continue
			}
			opened++
		}
	}
	if opened != 3 {
		t.Errorf("team-a's callers opened %d sessions; want its share, 3", opened)
	}
	if refusal.status != http.StatusServiceUnavailable || !strings.Contains(refusal.body, "--gateway-max-sessions-per-namespace") ||
		!strings.Contains(refusal.body, namespace) {
		t.Errorf("refusal: status %d %s; want 503 naming team-a and --gateway-max-sessions-per-namespace", refusal.status, refusal.body)
	}
	for _, e := range endpoints {
		if resp := initialize(t, ts.url(e, otherNamespace), bobToken); resp.status != http.StatusOK {
			t.Errorf("bob's %s session in team-b: status %d %s", e.kind, resp.status, resp.body)
		}
	}
}

// Starting sessions faster than the caller's rate is answered 429 with Retry-After,
// for server and toolset sessions alike; another caller is not held back.
func TestSessionsStartedFasterThanTheRateAre429WithRetryAfter(t *testing.T) {
	for _, e := range endpoints {
		t.Run(e.kind, func(t *testing.T) {
			// One session every 100 seconds after a burst of 2: the third is refused
			// however slow the machine.
			ts := newTenants(t, func(o *gateway.Options) {
				o.SessionRatePerCaller, o.SessionBurstPerCaller = 0.01, 2
			}, nil)
			opened, refusal := ts.fill(t, ts.url(e, namespace), aliceToken, 5)
			if opened != 2 {
				t.Fatalf("alice started %d sessions before a refusal; want the burst, 2", opened)
			}
			if refusal.status != http.StatusTooManyRequests {
				t.Errorf("refusal: status %d %s; want 429", refusal.status, refusal.body)
			}
			if after, err := strconv.Atoi(refusal.header.Get("Retry-After")); err != nil || after < 1 || after > 100 {
				t.Errorf("Retry-After %q; want the seconds until the next session, 1 to 100", refusal.header.Get("Retry-After"))
			}
			if !strings.Contains(refusal.body, "--gateway-session-rate-per-caller") {
				t.Errorf("refusal %s; want a JSON-RPC error naming --gateway-session-rate-per-caller", refusal.body)
			}
			if resp := initialize(t, ts.url(e, namespace), carolToken); resp.status != http.StatusOK {
				t.Errorf("carol: status %d %s; want a session", resp.status, resp.body)
			}
		})
	}
}

// Slots come back: when a session ends (the client's DELETE) and when its upstream
// session cannot be opened.
func TestSessionSlotsComeBackWhenSessionsEndOrFailToOpen(t *testing.T) {
	t.Run("ended sessions", func(t *testing.T) {
		for _, e := range endpoints {
			t.Run(e.kind, func(t *testing.T) {
				ts := newTenants(t, func(o *gateway.Options) { o.MaxSessionsPerCaller = 2 }, nil)
				first := initialize(t, ts.url(e, namespace), aliceToken)
				second := initialize(t, ts.url(e, namespace), aliceToken)
				if first.status != http.StatusOK || second.status != http.StatusOK {
					t.Fatalf("opening two sessions: %d, %d", first.status, second.status)
				}
				if resp := initialize(t, ts.url(e, namespace), aliceToken); resp.status != http.StatusServiceUnavailable {
					t.Fatalf("third session: status %d; want 503", resp.status)
				}
				if status := deleteSession(t, ts.url(e, namespace), aliceToken, first.header.Get("Mcp-Session-Id")); status != http.StatusNoContent {
					t.Fatalf("DELETE of a session: status %d; want 204", status)
				}
				if resp := initialize(t, ts.url(e, namespace), aliceToken); resp.status != http.StatusOK {
					t.Errorf("after ending a session: status %d %s; want a session in its slot", resp.status, resp.body)
				}
			})
		}
	})
	t.Run("failed upstream", func(t *testing.T) {
		ts := newTenants(t, func(o *gateway.Options) { o.MaxSessionsPerCaller = 2 }, nil)
		// A Ready server the pool holds no session with: its upstream cannot open.
		ghost := readyServer(connector.Key{Namespace: namespace, Name: "ghost"})
		ghost.Spec.Gateway = &mcpv1alpha1.GatewaySpec{MaxSessions: 1}
		ts.gw.Update(ghost)
		for i := range 4 {
			resp := initialize(t, ts.front.URL+gatewaypath.Server(namespace, "ghost"), aliceToken)
			if resp.status != http.StatusBadGateway {
				t.Fatalf("attempt %d on a server without upstream: status %d %s; want 502 every time", i+1, resp.status, resp.body)
			}
		}
		for range 2 {
			if resp := initialize(t, ts.url(endpoints[0], namespace), aliceToken); resp.status != http.StatusOK {
				t.Errorf("after failed opens: status %d %s; want alice's full quota of 2", resp.status, resp.body)
			}
		}
	})
}

// withoutSessionQuotas lifts the per-caller and per-namespace quotas and the session rate
// of a gateway to its MaxSessions, and the caller's sessionless requests in flight to as
// many, for tests that open many sessions or send many requests at once as one caller.
func withoutSessionQuotas(o *gateway.Options) {
	if o.MaxSessions == 0 {
		o.MaxSessions = gateway.DefaultMaxSessions
	}
	o.MaxSessionsPerCaller, o.MaxSessionsPerNamespace = o.MaxSessions, o.MaxSessions
	o.SessionRatePerCaller = math.Inf(1)
	o.MaxInflightPerCaller = o.MaxSessions
}
