package connector_test

import (
	"context"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// These tests put the egress package's policies on real connections: every attack on
// the list, on loopback.

const secretToken = "Bearer policy-test-secret-31337"

var serverLabels = map[string]string{"team": "search"}

// rulesFor compiles one policy selecting serverLabels in namespace "ns", or none.
func rulesFor(t *testing.T, spec *mcpv1alpha1.MCPEgressPolicySpec, posture egress.DefaultPosture) *egress.ServerRules {
	t.Helper()
	var policies []mcpv1alpha1.MCPEgressPolicy
	if spec != nil {
		spec.ServerSelector = metav1.LabelSelector{MatchLabels: serverLabels}
		policies = append(policies, mcpv1alpha1.MCPEgressPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "policy"},
			Spec:       *spec,
		})
	}
	set, errs := egress.Compile(policies, egress.Defaults{Posture: posture})
	if len(errs) > 0 {
		t.Fatalf("compiling policy: %v", errs)
	}
	return set.ForServer("ns", serverLabels)
}

// loopbackPolicy allows 127.0.0.0/8 and follows redirects as told.
func loopbackPolicy(redirects mcpv1alpha1.RedirectPolicyType, maxHops int32) *mcpv1alpha1.MCPEgressPolicySpec {
	return &mcpv1alpha1.MCPEgressPolicySpec{
		Egress:    []mcpv1alpha1.EgressRule{{To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "127.0.0.0/8"}}}}},
		Redirects: &mcpv1alpha1.RedirectRules{Policy: redirects, MaxHops: ptr.To(maxHops)},
	}
}

// mcpHandler serves a one-tool go-sdk server over Streamable HTTP.
func mcpHandler() http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "target", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "ping"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
}

// recorder counts the requests a server receives and keeps the Authorization values.
type recorder struct {
	mu       sync.Mutex
	requests int
	auth     []string
}

func (r *recorder) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests++
		if v := req.Header.Get("Authorization"); v != "" {
			r.auth = append(r.auth, v)
		}
		r.mu.Unlock()
		next.ServeHTTP(w, req)
	})
}

func (r *recorder) seen() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]string(nil), r.auth...)
}

// redirectTo answers every request with status and a Location of target.
func redirectTo(status int, target func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target(), status)
	})
}

// serve closes srv at cleanup. Servers are created before the pool, so the pool (and
// the streams its sessions hold open) closes first and Close does not wait on them.
func serve(t *testing.T, srv *httptest.Server) *httptest.Server {
	t.Cleanup(srv.Close)
	return srv
}

func newPool(t *testing.T) *connector.Pool {
	t.Helper()
	p, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func config(rawURL string, rules *egress.ServerRules) connector.Config {
	return connector.Config{
		URL:         rawURL,
		Protocol:    connector.ProtocolStreamableHTTP,
		Headers:     []connector.Header{{Name: "Authorization", Value: secretToken}},
		Timeout:     2 * time.Second,
		HealthCheck: connector.HealthCheck{Interval: time.Hour},
		Egress:      rules,
	}
}

// await polls the pool until cond holds for key.
func await(t *testing.T, p *connector.Pool, key connector.Key, what string, cond func(connector.Snapshot) bool) connector.Snapshot {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last connector.Snapshot
	for time.Now().Before(deadline) {
		if snap, ok := p.Snapshot(key); ok {
			last = snap
			if cond(snap) {
				return snap
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: timed out waiting for %s; last state %s, error %v", key, what, last.State, last.LastError)
	return last
}

func awaitReason(t *testing.T, p *connector.Pool, key connector.Key, reason string) connector.Snapshot {
	t.Helper()
	return await(t, p, key, reason, func(s connector.Snapshot) bool {
		return s.State == connector.StateDown && s.LastError != nil && s.LastError.Reason == reason
	})
}

func awaitReady(t *testing.T, p *connector.Pool, key connector.Key) {
	t.Helper()
	await(t, p, key, "Ready", func(s connector.Snapshot) bool { return s.State == connector.StateReady })
}

// assertNoSecret fails if the secret header value shows up anywhere a user could read.
func assertNoSecret(t *testing.T, snap connector.Snapshot) {
	t.Helper()
	if text := fmt.Sprintf("%+v", snap); strings.Contains(text, "policy-test-secret") {
		t.Errorf("snapshot carries the secret header value: %s", text)
	}
}

func TestRedirectToAnotherOriginNeverCarriesCredentials(t *testing.T) {
	for _, policy := range []mcpv1alpha1.RedirectPolicyType{mcpv1alpha1.RedirectDeny, mcpv1alpha1.RedirectSameOrigin, mcpv1alpha1.RedirectAllowedDestinations} {
		t.Run(string(policy), func(t *testing.T) {
			other := &recorder{}
			elsewhere := serve(t, httptest.NewServer(other.wrap(mcpHandler())))
			origin := serve(t, httptest.NewServer(redirectTo(http.StatusTemporaryRedirect, func() string { return elsewhere.URL + "/mcp" })))

			p := newPool(t)
			key := connector.Key{Namespace: "ns", Name: "redirected"}
			p.Ensure(key, config(origin.URL+"/mcp", rulesFor(t, loopbackPolicy(policy, 3), egress.PostureNone)))
			if policy == mcpv1alpha1.RedirectAllowedDestinations {
				// The other origin is an allowed destination: the session may live
				// there, but the credentials stay home.
				awaitReady(t, p, key)
			} else {
				snap := awaitReason(t, p, key, mcpv1alpha1.ReasonRedirectDenied)
				assertNoSecret(t, snap)
			}
			if _, auth := other.seen(); len(auth) > 0 {
				t.Fatalf("the other origin received the configured Authorization header: %d times", len(auth))
			}
		})
	}
}

func TestRedirectToMetadataAddressIsDenied(t *testing.T) {
	origin := serve(t, httptest.NewServer(redirectTo(http.StatusFound, func() string { return "http://169.254.169.254/latest/meta-data/" })))
	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "metadata"}
	// Even a policy that follows any allowed redirect and allows everything.
	spec := loopbackPolicy(mcpv1alpha1.RedirectAllowedDestinations, 5)
	spec.Egress[0].To = append(spec.Egress[0].To, mcpv1alpha1.EgressPeer{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "0.0.0.0/0"}})
	p.Ensure(key, config(origin.URL+"/mcp", rulesFor(t, spec, egress.PostureNone)))
	snap := awaitReason(t, p, key, mcpv1alpha1.ReasonRedirectDenied)
	if !strings.Contains(snap.LastError.Message, "169.254.169.254") {
		t.Errorf("the reason should name the denied target: %s", snap.LastError.Message)
	}
	assertNoSecret(t, snap)
}

func TestHTTPSDowngradeIsDenied(t *testing.T) {
	plain := &recorder{}
	insecure := serve(t, httptest.NewServer(plain.wrap(mcpHandler())))
	secure := serve(t, httptest.NewTLSServer(redirectTo(http.StatusPermanentRedirect, func() string { return insecure.URL + "/mcp" })))

	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "downgrade"}
	cfg := config(secure.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectAllowedDestinations, 5), egress.PostureNone))
	cfg.CABundle = pemCertificate(t, secure)
	p.Ensure(key, cfg)
	snap := awaitReason(t, p, key, mcpv1alpha1.ReasonRedirectDenied)
	if !strings.Contains(snap.LastError.Message, "downgrade") {
		t.Errorf("the reason should say it is a downgrade: %s", snap.LastError.Message)
	}
	if n, _ := plain.seen(); n > 0 {
		t.Fatalf("the plain http server received %d requests", n)
	}
}

func TestRedirectLoopBeyondMaxHopsIsDenied(t *testing.T) {
	var hops atomic.Int32
	var loop *httptest.Server
	loop = serve(t, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hops.Add(1)
		http.Redirect(w, r, fmt.Sprintf("%s/mcp/%d", loop.URL, n), http.StatusTemporaryRedirect)
	})))
	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "loop"}
	p.Ensure(key, config(loop.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectSameOrigin, 2), egress.PostureNone)))
	snap := awaitReason(t, p, key, mcpv1alpha1.ReasonRedirectDenied)
	if got := hops.Load(); got > 3*10 { // a few connect attempts, each stopped after maxHops
		t.Errorf("server saw %d redirected requests; each attempt must stop after 2 hops", got)
	}
	assertNoSecret(t, snap)
}

// fixedResolver answers every lookup with the addresses it holds at the time.
type fixedResolver struct {
	mu    sync.Mutex
	addrs []netip.Addr
}

func (r *fixedResolver) set(addrs ...netip.Addr) {
	r.mu.Lock()
	r.addrs = addrs
	r.mu.Unlock()
}

func (r *fixedResolver) LookupNetIP(_ context.Context, _, _ string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]netip.Addr(nil), r.addrs...), nil
}

func TestDNSRebindingToADeniedAddressIsCaughtAtDialTime(t *testing.T) {
	// go-sdk's own DNS rebinding protection refuses a foreign Host on a loopback
	// listener; this test is about the connector's, so present a local Host to it.
	handler := mcpHandler()
	srv := serve(t, httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Host = "127.0.0.1"
		handler.ServeHTTP(w, r)
	})))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	// The policy allows the server's own address only; the name is the attacker's.
	spec := &mcpv1alpha1.MCPEgressPolicySpec{Egress: []mcpv1alpha1.EgressRule{{
		To: []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: "127.0.0.1/32"}}},
	}}}
	resolver := &fixedResolver{}
	resolver.set(netip.MustParseAddr("127.0.0.1"))
	cfg := config("http://mcp.rebind.test:"+port+"/mcp", rulesFor(t, spec, egress.PostureNone))
	cfg.Resolver = resolver

	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "rebind"}
	p.Ensure(key, cfg)
	awaitReady(t, p, key)

	// The name now resolves to another loopback address the policy does not allow
	// (standing in for an internal service), and the session must reconnect. The
	// server's connections go too: servers with equal settings share kept-alive
	// connections, and one to the allowed address may rightly serve the new session.
	resolver.set(netip.MustParseAddr("127.0.0.2"))
	srv.CloseClientConnections()
	p.Remove(key)
	p.Ensure(key, cfg)
	snap := awaitReason(t, p, key, mcpv1alpha1.ReasonEgressDenied)
	if !strings.Contains(snap.LastError.Message, "127.0.0.2") {
		t.Errorf("the reason should name the address actually dialed: %s", snap.LastError.Message)
	}

	// And to the metadata address, which nothing can allow.
	resolver.set(netip.MustParseAddr("169.254.169.254"))
	srv.CloseClientConnections()
	p.Remove(key)
	p.Ensure(key, cfg)
	awaitReason(t, p, key, mcpv1alpha1.ReasonEgressDenied)
}

func TestDefaultPostures(t *testing.T) {
	srv := serve(t, httptest.NewServer(mcpHandler()))
	for _, tc := range []struct {
		posture egress.DefaultPosture
		allowed bool
	}{
		{egress.PosturePublic, false}, // loopback is not public
		{egress.PostureAll, true},
		{egress.PostureNone, false},
	} {
		t.Run(string(tc.posture), func(t *testing.T) {
			p := newPool(t)
			key := connector.Key{Namespace: "ns", Name: "posture"}
			p.Ensure(key, config(srv.URL+"/mcp", rulesFor(t, nil, tc.posture)))
			if tc.allowed {
				awaitReady(t, p, key)
			} else {
				awaitReason(t, p, key, mcpv1alpha1.ReasonEgressDenied)
			}
		})
	}
}

// pemCertificate returns the PEM of a TLS test server's certificate.
func pemCertificate(t *testing.T, srv *httptest.Server) []byte {
	t.Helper()
	cert := srv.Certificate()
	return pemEncode(cert.Raw)
}

func pemEncode(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestRedirectCarryingCredentialsIsDenied(t *testing.T) {
	target := &recorder{}
	elsewhere := serve(t, httptest.NewServer(target.wrap(mcpHandler())))
	origin := serve(t, httptest.NewServer(redirectTo(http.StatusTemporaryRedirect, func() string {
		return strings.Replace(elsewhere.URL, "http://", "http://admin:hunter2@", 1) + "/mcp"
	})))
	p := newPool(t)
	key := connector.Key{Namespace: "ns", Name: "userinfo"}
	p.Ensure(key, config(origin.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectAllowedDestinations, 3), egress.PostureNone)))
	snap := awaitReason(t, p, key, mcpv1alpha1.ReasonRedirectDenied)
	if strings.Contains(snap.LastError.Message, "hunter2") {
		t.Errorf("the reason repeats the redirect's password: %s", snap.LastError.Message)
	}
	if n, _ := target.seen(); n > 0 {
		t.Errorf("the redirect target received %d requests", n)
	}
}
