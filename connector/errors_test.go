package connector

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/egress"
)

// fakeResolver answers every host with fixed addresses, or fails.
type fakeResolver struct {
	addrs []netip.Addr
	err   error
}

func (r fakeResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r.addrs, r.err
}

// denyAll denies every dial.
type denyAll struct{}

func (denyAll) DecideDial(egress.Destination) egress.Decision {
	return egress.Decision{Policy: "ns/lockdown", Reason: "no rule allows this destination"}
}
func (denyAll) DecideRedirect(egress.Redirect) egress.Decision { return egress.Decision{} }

// closedPortURL returns a loopback URL nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/mcp"
}

func TestFailuresAreClassified(t *testing.T) {
	healthy := serveStreamable(t, newServer(1, nil), nil)
	tlsServer := httptest.NewTLSServer(statelessHandler(newServer(1, nil)))
	t.Cleanup(tlsServer.Close)
	hostURL := func(u string) string { // the same server, addressed by a host name
		return strings.Replace(u, "127.0.0.1", "mcp.example.test", 1)
	}

	cases := []struct {
		name       string
		cfg        func() Config
		wantReason string
		wantText   string
		// transient says whether the failure heals by itself: Reconciling, not Stalled.
		transient bool
	}{
		{
			name:       "DNS failure",
			cfg:        func() Config { c := fastConfig("http://no-such-host.invalid/mcp"); return c },
			wantReason: ReasonDNSFailure, transient: true,
		},
		{
			name: "DNS failure from the injected resolver",
			cfg: func() Config {
				c := fastConfig(hostURL(healthy.URL))
				c.Resolver = fakeResolver{err: &net.DNSError{Err: "no such host", Name: "mcp.example.test", IsNotFound: true}}
				return c
			},
			wantReason: ReasonDNSFailure, wantText: "mcp.example.test not found", transient: true,
		},
		{
			name:       "connection refused",
			cfg:        func() Config { return fastConfig(closedPortURL(t)) },
			wantReason: ReasonConnectionRefused, transient: true,
		},
		{
			name:       "untrusted certificate",
			cfg:        func() Config { return fastConfig(tlsServer.URL) },
			wantReason: ReasonTLSError, wantText: "unknown authority",
		},
		{
			name: "CA bundle without a certificate",
			cfg: func() Config {
				c := fastConfig(tlsServer.URL)
				c.CABundle = []byte("not pem")
				return c
			},
			wantReason: ReasonInvalidSpec,
		},
		{
			name:       "unsupported URL scheme",
			cfg:        func() Config { return fastConfig("ftp://127.0.0.1/mcp") },
			wantReason: ReasonInvalidSpec, wantText: `scheme "ftp"`,
		},
		{
			name: "egress decider denies the address",
			cfg: func() Config {
				c := fastConfig(healthy.URL)
				c.Egress = denyAll{}
				return c
			},
			wantReason: ReasonEgressDenied, wantText: "policy ns/lockdown",
		},
		{
			name: "DNS rebinding to the metadata service",
			cfg: func() Config {
				c := fastConfig(hostURL(healthy.URL))
				c.Resolver = fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("169.254.169.254")}}
				c.Egress = allowRedirects{} // even a decider that allows everything
				return c
			},
			wantReason: ReasonEgressDenied, wantText: "cloud metadata",
		},
		{
			name: "IPv4-mapped IPv6 link-local",
			cfg: func() Config {
				c := fastConfig(hostURL(healthy.URL))
				c.Resolver = fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("::ffff:169.254.10.10")}}
				return c
			},
			wantReason: ReasonEgressDenied, wantText: "link-local",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testPool(t, func(o *Options) { o.InitialBackoff = time.Minute })
			key := Key{"ns", "failing"}
			p.Ensure(key, tc.cfg())
			snap := waitDown(t, p, key, tc.wantReason)
			if !strings.Contains(snap.LastError.Message, tc.wantText) {
				t.Errorf("message %q does not contain %q", snap.LastError.Message, tc.wantText)
			}
			if snap.LastError.Transient != tc.transient {
				t.Errorf("%s: Transient = %v, want %v", snap.LastError, snap.LastError.Transient, tc.transient)
			}
		})
	}
}

// TestCleanSessionEndIsTransient ends a live session from the server side, as a
// restarting server does: that is a session to reconnect, not a protocol violation a
// person has to fix.
func TestCleanSessionEndIsTransient(t *testing.T) {
	server := newServer(1, nil)
	ts := serveSSE(t, server)
	p := testPool(t, func(o *Options) { o.InitialBackoff = time.Minute })
	key := Key{"ns", "ending"}
	cfg := fastConfig(ts.URL)
	cfg.Protocol = ProtocolSSE
	p.Ensure(key, cfg)
	waitReady(t, p, key)

	for ss := range server.Sessions() {
		if err := ss.Close(); err != nil {
			t.Fatal(err)
		}
	}
	down := waitFor(t, p, key, "the session to end", func(s Snapshot) bool { return s.LastError != nil })
	if down.LastError.Reason != ReasonSessionEnded || !down.LastError.Transient {
		t.Errorf("a session the server ended is reported as %s (transient %v), want %s, transient",
			down.LastError, down.LastError.Transient, ReasonSessionEnded)
	}
}

func TestResolvedHostIsDialedByAddress(t *testing.T) {
	// go-sdk rejects non-localhost Host headers on loopback unless told otherwise.
	healthy := serveStreamable(t, newServer(1, nil), &mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	p := testPool(t)
	key := Key{"ns", "by-name"}
	cfg := fastConfig(strings.Replace(healthy.URL, "127.0.0.1", "mcp.example.test", 1))
	cfg.Resolver = fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	p.Ensure(key, cfg)
	waitReady(t, p, key)
}

func TestCABundleExtendsSystemRoots(t *testing.T) {
	ts := httptest.NewTLSServer(statelessHandler(newServer(1, nil)))
	t.Cleanup(ts.Close)
	p := testPool(t)
	key := Key{"ns", "tls"}
	cfg := fastConfig(ts.URL)
	cfg.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	p.Ensure(key, cfg)
	waitReady(t, p, key)
}

func TestDefaultDecider(t *testing.T) {
	d := DefaultEgressDecider()
	for addr, allowed := range map[string]bool{
		"127.0.0.1":          true,
		"::1":                true,
		"10.1.2.3":           true,
		"93.184.216.34":      true,
		"169.254.169.254":    false,
		"169.254.1.1":        false,
		"fe80::1":            false,
		"fd00:ec2::254":      false,
		"100.100.100.200":    false,
		"0.0.0.0":            false,
		"::":                 false,
		"224.0.0.1":          false,
		"ff02::1":            false,
		"::ffff:169.254.0.1": false, // IPv4-mapped link-local
	} {
		a := netip.MustParseAddr(addr)
		got := d.DecideDial(egress.Destination{Scheme: "https", Host: "h", Addr: a, Port: 443})
		if got.Allowed != allowed {
			t.Errorf("DecideDial(%s) = %+v, want allowed=%v", addr, got, allowed)
		}
	}
	if d.DecideRedirect(egress.Redirect{Hop: 1}).Allowed {
		t.Error("default decider follows redirects")
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) write(prefix, args string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(&s.b, "%s %s\n", prefix, args)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretsNeverLeak configures a secret header value and a secret query string and
// checks that neither shows up in errors, snapshots or logs, across failure cases.
func TestSecretsNeverLeak(t *testing.T) {
	const (
		headerSecret = "header-s3cret-value"
		querySecret  = "query-s3cret-value"
	)
	echoSecrets := func(w http.ResponseWriter, r *http.Request, status int) {
		// A hostile server that quotes the request back at us.
		http.Error(w, fmt.Sprintf("rejected %s %s", r.URL.String(), r.Header.Get("Authorization")), status)
	}
	redirector := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:1/next?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
	}))
	servers := map[string]string{
		"unauthorized": startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echoSecrets(w, r, 401) })).URL,
		"not found":    startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echoSecrets(w, r, 404) })).URL,
		"server error": startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { echoSecrets(w, r, 500) })).URL,
		"redirect":     redirector.URL,
		"refused":      strings.TrimSuffix(closedPortURL(t), "/mcp"),
		"dns":          "http://no-such-host.invalid",
		"stall": startServer(t, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			stall(r)
		})).URL,
		"malformed": startServer(t, intercept(statelessHandler(newServer(1, nil)), "tools/list", func(w http.ResponseWriter, r *http.Request, id json.RawMessage) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":"%s %s`, id, r.URL.RawQuery, r.Header.Get("Authorization"))
		})).URL,
	}

	var logs syncBuffer
	p := testPool(t, func(o *Options) {
		o.Logger = funcr.New(logs.write, funcr.Options{Verbosity: 10})
	})
	for name, base := range servers {
		for _, protocol := range []Protocol{ProtocolAuto, ProtocolSSE} {
			key := Key{"ns", strings.ReplaceAll(name, " ", "-") + "-" + strings.ToLower(string(protocol))}
			cfg := fastConfig(base + "/mcp?token=" + querySecret + "&x=1")
			cfg.ConnectTimeout = 300 * time.Millisecond
			cfg.Timeout = 300 * time.Millisecond
			cfg.Protocol = protocol
			cfg.Headers = []Header{{Name: "Authorization", Value: "Bearer " + headerSecret}}
			p.Ensure(key, cfg)
			snap := waitFor(t, p, key, "a failure", func(s Snapshot) bool { return s.LastError != nil })
			text := fmt.Sprintf("%+v %s %s", snap, snap.LastError.Error(), snap.Endpoint)
			t.Logf("%s: %s", key, snap.LastError)
			for _, secret := range []string{headerSecret, querySecret, "token="} {
				if strings.Contains(text, secret) {
					t.Errorf("%s: snapshot leaks %q: %s", key, secret, text)
				}
			}
		}
	}
	for _, secret := range []string{headerSecret, querySecret, "token="} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("logs leak %q:\n%s", secret, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "Session down") {
		t.Errorf("expected transition logs, got:\n%s", logs.String())
	}
}

func TestScrubQueries(t *testing.T) {
	got := ScrubQueries(`Post "https://h:1/p?token=x&y=2": EOF; see http://a/b#frag and ftp://c?d`)
	want := `Post "https://h:1/p": EOF; see http://a/b and ftp://c`
	if got != want {
		t.Errorf("ScrubQueries = %q, want %q", got, want)
	}
}
