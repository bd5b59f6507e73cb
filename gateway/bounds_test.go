package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// sessionlessMeta is the _meta every sessionless request carries: its protocol version
// and the client's capabilities.
const sessionlessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + sessionlessVersion +
	`","io.modelcontextprotocol/clientCapabilities":{}}`

// sessionlessRequest sends one sessionless request (method, with name in Mcp-Name when
// set and params inside the params object beside _meta) as the caller of token and
// returns the answer.
func sessionlessRequest(t *testing.T, url, token, method, name, params string) answer {
	t.Helper()
	a, err := trySessionless(t.Context(), url, token, method, name, params)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// trySessionless is sessionlessRequest in ctx, returning its error.
func trySessionless(ctx context.Context, url, token, method, name, params string) (answer, error) {
	resp, err := sendSessionless(ctx, url, token, method, name, params)
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(data)}, err
}

// sendSessionless sends the request sessionlessRequest does in ctx and returns the
// response, its body unread.
func sendSessionless(ctx context.Context, url, token, method, name, params string) (*http.Response, error) {
	if params != "" {
		params += ","
	}
	return postSessionlessBody(ctx, url, token, method, name,
		`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{`+params+sessionlessMeta+`}}`)
}

// postSessionlessBody posts body as one sessionless request of method (and name, in
// Mcp-Name when set) as the caller of token, and returns the response, its body unread.
func postSessionlessBody(ctx context.Context, url, token, method, name, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("MCP-Protocol-Version", sessionlessVersion)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	return http.DefaultClient.Do(req)
}

// listTools sends a sessionless tools/list as the caller of token.
func listTools(t *testing.T, url, token string) answer {
	t.Helper()
	return sessionlessRequest(t, url, token, "tools/list", "", "")
}

// callEcho sends a sessionless tools/call of echo as the caller of token.
func callEcho(t *testing.T, url, token string) answer {
	t.Helper()
	return sessionlessRequest(t, url, token, "tools/call", "echo", `"name":"echo","arguments":{"text":"hello"}`)
}

// wantRefusal checks that a is a JSON-RPC error answered with status and a Retry-After,
// naming every one of names.
func wantRefusal(t *testing.T, what string, a answer, status int, names ...string) {
	t.Helper()
	if a.status != status {
		t.Errorf("%s: status %d %s; want %d", what, a.status, a.body, status)
		return
	}
	if after, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || after < 1 {
		t.Errorf("%s: Retry-After %q; want a number of seconds", what, a.header.Get("Retry-After"))
	}
	if !strings.Contains(a.body, `"error"`) {
		t.Errorf("%s: %s; want a JSON-RPC error", what, a.body)
	}
	for _, name := range names {
		if !strings.Contains(a.body, name) {
			t.Errorf("%s: %s; want it to name %s", what, a.body, name)
		}
	}
}

// wantServed checks that a is a sessionless request's answer without error.
func wantServed(t *testing.T, what string, a answer) {
	t.Helper()
	if a.status != http.StatusOK || strings.Contains(a.body, `"error"`) {
		t.Errorf("%s: status %d %s; want it served", what, a.status, a.body)
	}
}

// The upstream session the gateway opens for a sessionless client of a server of the
// session era is a session like any other: a replica full of sessions, a namespace at its
// share and a caller at its quota refuse it as they refuse a session (finding 5 of issue
// 46: a full replica refused the caller's session with 503 and still opened one for its
// sessionless requests).
func TestSessionlessClientsOfSessionEraServersCountAgainstTheSessionQuotas(t *testing.T) {
	t.Run("a replica full of sessions", func(t *testing.T) {
		ts := newTenants(t, func(o *gateway.Options) { o.MaxSessions = 3; withoutSessionQuotas(o) }, nil)
		if opened, refusal := ts.fill(t, ts.url(endpoints[0], namespace), aliceToken, 4); opened != 3 || refusal.status != http.StatusServiceUnavailable {
			t.Fatalf("alice opened %d sessions, then %d; want 3, then 503", opened, refusal.status)
		}
		initialized := ts.upstream.calls("initialize")
		for _, token := range []string{aliceToken, bobToken} {
			for _, ns := range []string{namespace, otherNamespace} {
				wantRefusal(t, token+"'s sessionless tools/list in "+ns, listTools(t, ts.url(endpoints[0], ns), token),
					http.StatusServiceUnavailable, "--gateway-max-sessions")
			}
		}
		if n := ts.upstream.calls("initialize") - initialized; n != 0 {
			t.Errorf("the server was sent %d initialize requests for refused sessionless requests", n)
		}
		if lines := ts.audit.matching(`"Session refused"`, `"caller"="alice"`, `"status"=503`); len(lines) < 3 {
			t.Errorf("audit lines of alice's refusals: %d, want one per refusal:\n%s", len(lines), ts.audit.all())
		}
	})
	t.Run("a namespace at its share", func(t *testing.T) {
		// 12 sessions a replica: a namespace's share is a quarter, 3.
		ts := newTenants(t, func(o *gateway.Options) { o.MaxSessions = 12 }, nil)
		for _, token := range []string{aliceToken, carolToken, aliceToken} {
			if resp := initialize(t, ts.url(endpoints[0], namespace), token); resp.status != http.StatusOK {
				t.Fatalf("filling team-a: status %d %s", resp.status, resp.body)
			}
		}
		wantRefusal(t, "alice's sessionless tools/list in team-a", listTools(t, ts.url(endpoints[0], namespace), aliceToken),
			http.StatusServiceUnavailable, "--gateway-max-sessions-per-namespace", namespace)
		wantServed(t, "bob's sessionless tools/list in team-b", listTools(t, ts.url(endpoints[0], otherNamespace), bobToken))
	})
	t.Run("a caller at its quota", func(t *testing.T) {
		ts := newTenants(t, func(o *gateway.Options) { o.MaxSessionsPerCaller = 2 }, nil)
		// A toolset's sessions take no session with the server: only the caller's quota
		// stands in the way.
		for range 2 {
			if resp := initialize(t, ts.url(endpoints[1], namespace), aliceToken); resp.status != http.StatusOK {
				t.Fatalf("alice's toolset session: status %d %s", resp.status, resp.body)
			}
		}
		wantRefusal(t, "alice's sessionless tools/list", listTools(t, ts.url(endpoints[0], namespace), aliceToken),
			http.StatusServiceUnavailable, "--gateway-max-sessions-per-caller", "alice")
		wantServed(t, "carol's sessionless tools/list", listTools(t, ts.url(endpoints[0], namespace), carolToken))
	})
	t.Run("the session it holds refuses a session beyond the quota, until it ends", func(t *testing.T) {
		ts := newTenants(t, func(o *gateway.Options) {
			o.MaxSessionsPerCaller = 1
			o.IdleTimeout = 50 * time.Millisecond
		}, nil)
		wantServed(t, "alice's sessionless tools/list", listTools(t, ts.url(endpoints[0], namespace), aliceToken))
		resp := initialize(t, ts.url(endpoints[1], namespace), aliceToken)
		if resp.status != http.StatusServiceUnavailable || !strings.Contains(resp.body, "--gateway-max-sessions-per-caller") {
			t.Errorf("alice's toolset session beside her sessionless one: status %d %s; want 503 naming --gateway-max-sessions-per-caller",
				resp.status, resp.body)
		}
		// Idle, the upstream session ends and gives its slot back.
		testutil.Eventually(t, 10*time.Second, "alice's toolset session once the sessionless one is idle", func() error {
			if resp := initialize(t, ts.url(endpoints[1], namespace), aliceToken); resp.status != http.StatusOK {
				return fmt.Errorf("status %d %s", resp.status, resp.body)
			}
			return nil
		})
	})
}

// listenStream is an open subscriptions/listen stream; close ends it.
type listenStream struct {
	answer
	close func()
}

// openListen opens a subscriptions/listen stream for tools/list_changed as the caller of
// token and, once the gateway has acknowledged it, returns it open; a refusal is returned
// closed, with its body.
func openListen(t *testing.T, url, token string) listenStream {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	resp, err := sendSessionless(ctx, url, token, "subscriptions/listen", "", `"notifications":{"toolsListChanged":true}`)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	closeStream := func() {
		cancel()
		_ = resp.Body.Close()
	}
	t.Cleanup(closeStream)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		a.body = string(data)
		closeStream()
		return listenStream{answer: a, close: closeStream}
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		a.body += lines.Text() + "\n"
		if strings.Contains(lines.Text(), "notifications/subscriptions/acknowledged") {
			return listenStream{answer: a, close: closeStream}
		}
		if strings.Contains(lines.Text(), `"error"`) || strings.Contains(lines.Text(), `"result"`) {
			break
		}
	}
	t.Fatalf("the listen stream ended without an acknowledgement: %s", a.body)
	return listenStream{}
}

// subscriptions/listen streams are bounded per caller (429) and per replica (503), both
// with Retry-After, for servers and toolsets alike, and a stream that closes gives its
// place back (finding 6 of issue 46: one caller held 80 open with
// --gateway-max-sessions-per-caller=2).
func TestListenStreamsAreBoundedPerCallerAndPerReplica(t *testing.T) {
	for _, e := range endpoints {
		t.Run(e.kind, func(t *testing.T) {
			ts := newTenants(t, func(o *gateway.Options) {
				o.MaxSessionsPerCaller = 2
				o.MaxListenStreamsPerCaller, o.MaxListenStreams = 2, 3
			}, nil)
			url := ts.url(e, namespace)
			first := openListen(t, url, aliceToken)
			if first.status != http.StatusOK {
				t.Fatalf("alice's first listen stream: status %d %s", first.status, first.body)
			}
			if second := openListen(t, url, aliceToken); second.status != http.StatusOK {
				t.Fatalf("alice's second listen stream: status %d %s", second.status, second.body)
			}
			wantRefusal(t, "alice's third listen stream", openListen(t, url, aliceToken).answer,
				http.StatusTooManyRequests, "--gateway-max-listen-streams-per-caller", "alice")
			if carol := openListen(t, url, carolToken); carol.status != http.StatusOK {
				t.Fatalf("carol's listen stream beside alice's: status %d %s", carol.status, carol.body)
			}
			wantRefusal(t, "bob's listen stream in a replica holding 3", openListen(t, ts.url(e, otherNamespace), bobToken).answer,
				http.StatusServiceUnavailable, "--gateway-max-listen-streams")
			if n := gauge(t, ts.harness, "switchboard_gateway_listen_streams"); n != 3 {
				t.Errorf("switchboard_gateway_listen_streams is %v; want the 3 open", n)
			}
			// Requests other than listen are no streams: alice's are served.
			wantServed(t, "alice's tools/list beside her streams", listTools(t, url, aliceToken))

			first.close()
			testutil.Eventually(t, 10*time.Second, "a listen stream in the place of alice's closed one", func() error {
				again := openListen(t, url, aliceToken)
				if again.status != http.StatusOK {
					return fmt.Errorf("status %d %s", again.status, again.body)
				}
				return nil
			})
			if n := refusedRequests(t, ts.harness, "429") + refusedRequests(t, ts.harness, "503"); n < 2 {
				t.Errorf("switchboard_gateway_refused_requests_total counts %v refusals of 429 and 503; want at least the 2 refused streams", n)
			}
		})
	}
}

// gauge reads the gauge without labels name off the harness's registry.
func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	families, err := h.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("the registry has no gauge %s", name)
	return 0
}

// refusedRequests reads switchboard_gateway_refused_requests_total{code} off the harness's
// registry.
func refusedRequests(t *testing.T, h *harness, code string) float64 {
	t.Helper()
	families, err := h.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchboard_gateway_refused_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// One caller's slow sessionless calls take at most its share of the requests in flight:
// its next is refused with 429 and Retry-After while another caller's call is served, of
// a sessionless server (one upstream client, or bridge, for every caller) and of a server
// with sessions alike (finding 6 of issue 46: one caller's slow calls could take every
// one of the bridge's 256 slots).
func TestOneCallersSlowCallsLeaveOtherCallersTheirShare(t *testing.T) {
	for _, era := range []struct {
		name      string
		stateless bool
	}{{"sessionless server", true}, {"server with sessions", false}} {
		t.Run(era.name, func(t *testing.T) {
			const share = 2
			allowed := fake.NewClientset()
			allowed.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
				sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
				sar.Status.Allowed = true
				return true, sar, nil
			})
			h := newHarness(t, harnessOptions{statelessUpstream: era.stateless, gateway: func(o *gateway.Options) {
				o.Authenticator = tokens{aliceToken: "alice", bobToken: "bob"}
				o.Access = allowed.AuthorizationV1().SubjectAccessReviews()
				o.MaxInflightPerCaller = share
			}})
			var waiting atomic.Int32
			release := make(chan struct{})
			mcp.AddTool(h.upstream.mcp, &mcp.Tool{Name: "slow"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
				waiting.Add(1)
				select {
				case <-ctx.Done():
				case <-release:
				}
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
			})
			var slow sync.WaitGroup
			answers := make(chan answer, share)
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
				slow.Wait()
			})
			for range share {
				slow.Go(func() {
					a, err := trySessionless(t.Context(), h.url(), aliceToken, "tools/call", "slow", `"name":"slow","arguments":{}`)
					if err != nil {
						t.Errorf("alice's slow call: %v", err)
					}
					answers <- a
				})
			}
			testutil.Eventually(t, 10*time.Second, "alice's slow calls to reach the server", func() error {
				if n := waiting.Load(); n != share {
					return fmt.Errorf("%d of %d waiting", n, share)
				}
				return nil
			})
			wantRefusal(t, "alice's call beyond her share", callEcho(t, h.url(), aliceToken),
				http.StatusTooManyRequests, "--gateway-max-inflight-per-caller", "alice")
			if bob := callEcho(t, h.url(), bobToken); bob.status != http.StatusOK || !strings.Contains(bob.body, "hello") {
				t.Errorf("bob's call while alice holds her share: status %d %s; want hello", bob.status, bob.body)
			}
			close(release)
			slow.Wait()
			close(answers)
			for a := range answers {
				if a.status != http.StatusOK || !strings.Contains(a.body, "done") {
					t.Errorf("alice's slow call: status %d %s; want done", a.status, a.body)
				}
			}
			if a := callEcho(t, h.url(), aliceToken); a.status != http.StatusOK || !strings.Contains(a.body, "hello") {
				t.Errorf("alice's call once her slow ones are answered: status %d %s; want hello", a.status, a.body)
			}
		})
	}
}
