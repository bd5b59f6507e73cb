package connector

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/egress"
)

// denyEverything is a decider that denies every dial and hop.
type denyEverything struct{}

func (denyEverything) DecideDial(egress.Destination) egress.Decision {
	return egress.Decision{Reason: "denied by the test"}
}

func (denyEverything) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Reason: "denied by the test"}
}

// allowAlso allows everything too, but is another decider than allowEverything: the two
// are not known to decide alike.
type allowAlso struct{}

func (allowAlso) DecideDial(egress.Destination) egress.Decision {
	return egress.Decision{Allowed: true}
}

func (allowAlso) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Allowed: true}
}

// recordingServer counts the TCP connections it accepts and remembers the X-Tenant
// header of every request by path.
type recordingServer struct {
	*httptest.Server
	mu      sync.Mutex
	conns   int
	tenants map[string][]string
}

func startRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	rs := &recordingServer{tenants: map[string][]string{}}
	rs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.tenants[r.URL.Path] = append(rs.tenants[r.URL.Path], r.Header.Get("X-Tenant"))
		rs.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	rs.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			rs.mu.Lock()
			rs.conns++
			rs.mu.Unlock()
		}
	}
	rs.Start()
	t.Cleanup(rs.Close)
	return rs
}

func (rs *recordingServer) connections() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.conns
}

func (rs *recordingServer) tenantsOf(path string) []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.tenants[path]...)
}

// stackFor builds a stack for path on rs with decider d and header X-Tenant: tenant.
func stackFor(t *testing.T, rs *recordingServer, path, tenant string, d EgressDecider) *httpStack {
	t.Helper()
	endpoint, _ := url.Parse(rs.URL + path)
	cfg := fastConfig(endpoint.String())
	cfg.Egress = d
	cfg.Headers = []Header{{Name: "X-Tenant", Value: tenant}}
	stack, err := newHTTPStack(cfg.withDefaults(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.close)
	return stack
}

// get sends one GET through stack to its endpoint and reads the answer to its end.
func get(stack *httpStack) error {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, stack.endpoint.String(), nil)
	resp, err := stack.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// TestEqualSettingsShareConnectionsButNotHeaders: two servers with equal connection
// settings and deciders that decide alike reach their origin over one kept-alive
// connection, and each request carries its own server's header, never the other's.
func TestEqualSettingsShareConnectionsButNotHeaders(t *testing.T) {
	rs := startRecordingServer(t)
	a := stackFor(t, rs, "/a", "tenant-a-secret", allowEverything{})
	b := stackFor(t, rs, "/b", "tenant-b-secret", allowEverything{})
	for range 3 {
		for _, s := range []*httpStack{a, b} {
			if err := get(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := rs.connections(); n != 1 {
		t.Errorf("two servers with equal settings opened %d connections for six sequential requests; want 1 shared", n)
	}
	for path, want := range map[string]string{"/a": "tenant-a-secret", "/b": "tenant-b-secret"} {
		got := rs.tenantsOf(path)
		if len(got) != 3 {
			t.Errorf("%s got %d requests, want 3", path, len(got))
		}
		for _, v := range got {
			if v != want {
				t.Errorf("%s received X-Tenant %q; want only its own %q", path, v, want)
			}
		}
	}
}

// TestDifferentDecidersNeverShareConnections: a server whose decider is not known to
// decide like another's never reuses the other's kept-alive connection. One that denies
// the origin reaches nothing although an allowed server holds an idle connection to it;
// one that allows it too opens a connection of its own.
func TestDifferentDecidersNeverShareConnections(t *testing.T) {
	rs := startRecordingServer(t)
	allowed := stackFor(t, rs, "/allowed", "allowed", allowEverything{})
	if err := get(allowed); err != nil {
		t.Fatal(err)
	}

	denied := stackFor(t, rs, "/denied", "denied", denyEverything{})
	var e *Error
	if err := get(denied); !errors.As(err, &e) || e.Reason != ReasonEgressDenied {
		t.Fatalf("denied server's request: got %v, want EgressDenied", err)
	}
	if got := rs.tenantsOf("/denied"); len(got) != 0 {
		t.Errorf("the denied server's request reached the origin %d times over another server's connection", len(got))
	}

	other := stackFor(t, rs, "/other", "other", allowAlso{})
	if err := get(other); err != nil {
		t.Fatal(err)
	}
	if n := rs.connections(); n != 2 {
		t.Errorf("servers with different deciders used %d connections; want 2, one each", n)
	}
}

// TestDeciderChangeLeavesSharedConnectionsToTheOthers: when one server's decider changes
// to deny its origin, that server reaches nothing more, while the server it shared a
// transport with keeps using the kept-alive connection.
func TestDeciderChangeLeavesSharedConnectionsToTheOthers(t *testing.T) {
	rs := startRecordingServer(t)
	a := stackFor(t, rs, "/a", "a", allowEverything{})
	b := stackFor(t, rs, "/b", "b", allowEverything{})
	for _, s := range []*httpStack{a, b} {
		if err := get(s); err != nil {
			t.Fatal(err)
		}
	}
	a.setDecider(denyEverything{})
	var e *Error
	if err := get(a); !errors.As(err, &e) || e.Reason != ReasonEgressDenied {
		t.Fatalf("after its decider changed, a's request: got %v, want EgressDenied", err)
	}
	if err := get(b); err != nil {
		t.Fatal(err)
	}
	if got := rs.tenantsOf("/a"); len(got) != 1 {
		t.Errorf("a reached the origin %d times; want once, before the change", len(got))
	}
	if n := rs.connections(); n != 1 {
		t.Errorf("b opened a new connection after a's decider changed (%d in all); want its kept-alive one", n)
	}
}

// TestLastStackReleasesTheSharedTransport: a transport no stack uses is dropped, so a
// fleet that shrinks does not keep transports (and their idle connections) around.
func TestLastStackReleasesTheSharedTransport(t *testing.T) {
	endpoint, _ := url.Parse("http://127.0.0.1:9/mcp")
	cfg := fastConfig(endpoint.String())
	cfg.ConnectTimeout = 1234 * time.Millisecond // a key no other test uses
	cfg = cfg.withDefaults()
	var stacks []*httpStack
	for range 3 {
		s, err := newHTTPStack(cfg, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, s)
	}
	if got := transports.count(cfg); got != 1 {
		t.Errorf("three stacks with equal settings made %d transports; want 1", got)
	}
	for _, s := range stacks {
		s.close()
	}
	if got := transports.count(cfg); got != 0 {
		t.Errorf("%d transports left after every stack closed; want 0", got)
	}
}

// TestResponsesReferToTheCallersRequest: the response handed back names the request its
// caller made, not the stack's clone of it, which carries the configured headers.
func TestResponsesReferToTheCallersRequest(t *testing.T) {
	rs := startRecordingServer(t)
	stack := stackFor(t, rs, "/a", "tenant-a-secret", allowEverything{})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, stack.endpoint.String(), nil)
	resp, err := stack.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if got := rs.tenantsOf("/a"); len(got) != 1 || got[0] != "tenant-a-secret" {
		t.Fatalf("server saw X-Tenant %q; want the configured header", got)
	}
	if resp.Request != req {
		t.Errorf("the response refers to another request than the caller's")
	}
	if v := resp.Request.Header.Get("X-Tenant"); v != "" {
		t.Errorf("the response's request carries the configured header %q", v)
	}
}
