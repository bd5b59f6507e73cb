package connector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// perUserClientEnv, set, makes the test binary the client under test of one of the MCP
// conformance suite's authorization code scenarios instead of running tests (see
// runPerUserConformanceClient).
const perUserClientEnv = "SWITCHBOARD_TEST_PERUSER_CLIENT"

func init() {
	// In init, not TestMain: budget_heap_test.go's TestMain is built without -race.
	if os.Getenv(perUserClientEnv) != "" {
		if err := runPerUserConformanceClient(); err != nil {
			fmt.Fprintln(os.Stderr, "peruser client:", err)
			os.Exit(1)
		}
		fmt.Println("peruser client: called test-tool as the person")
		os.Exit(0)
	}
}

// runPerUserConformanceClient is the connector as the client of the scenario: the pool
// holds the scenario's server as a perUser server with no client ID (the admin allows
// dynamic client registration and lists the scenario's authorization server), and an
// Upstream acting for one person initializes, calls test-tool, and is answered
// AuthorizationRequired; in its place the pool's hook does what the gateway's broker
// and the person's browser do (the authorization URL, the authorization server's
// redirect back, the code exchange), and the person's call runs again with their grant.
func runPerUserConformanceClient() error {
	serverURL := os.Args[len(os.Args)-1]
	authServers, err := scenarioAuthorizationServers(serverURL)
	if err != nil {
		return err
	}
	su, err := url.Parse(serverURL)
	if err != nil {
		return err
	}
	// The gateway's callback: the suite's authorization server redirects the browser
	// here, and the browser stops at it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	_ = l.Close()
	redirectURL := "http://" + l.Addr().String() + "/oauth2/callback"

	var p *Pool
	authorized := 0
	p, err = NewPool(Options{Grants: &memGrants{}, AuthorizationRequired: func(ctx context.Context, key Key, c Caller) *jsonrpc.Error {
		authorized++
		if authorized > 1 {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "asked to authorize twice"}
		}
		if err := authorizeInBrowser(ctx, p.UserAuthorizer(key), c, redirectURL); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
		}
		return &jsonrpc.Error{Code: mcp.CodeURLElicitationRequired, Message: "authorized: call again"}
	}})
	if err != nil {
		return err
	}
	defer p.Close()
	key := Key{"conformance", "per-user"}
	p.Ensure(key, Config{
		URL:      serverURL,
		Protocol: ProtocolStreamableHTTP,
		Timeout:  10 * time.Second,
		Egress:   allowAll{}, // the suite serves on localhost
		PerUser: &PerUser{Provider: "conformance-idp", AuthorizationServers: authServers,
			Resources: []string{su.Scheme + "://" + su.Host}, AllowInsecureHTTP: true, DynamicClientRegistration: true},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-p.Settled(key):
	case <-ctx.Done():
		return ctx.Err()
	}
	if snap, _ := p.Snapshot(key); snap.LastError != nil {
		return fmt.Errorf("the server's metadata: %w", snap.LastError)
	}
	u, err := p.OpenUpstream(ctx, key, &Caller{Key: "person", Provider: "conformance-idp", Username: "person"})
	if err != nil {
		return err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-peruser"}, nil)
	cs, err := client.Connect(ctx, &connTransport{u}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		_ = u.Close()
		return fmt.Errorf("initialize: %w", err)
	}
	defer func() { _ = cs.Close() }()
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test-tool", Arguments: map[string]any{}})
	if wire, ok := errors.AsType[*jsonrpc.Error](err); !ok || wire.Code != mcp.CodeURLElicitationRequired {
		return fmt.Errorf("the person's first call answered %w; want them asked to authorize", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test-tool", Arguments: map[string]any{}}); err != nil {
		return fmt.Errorf("tools/call once authorized: %w", err)
	}
	return nil
}

// authorizeInBrowser is the broker's and the person's part: the authorization URL, the
// browser at the authorization server (which approves at once and redirects back), the
// callback's checks and the code exchange.
func authorizeInBrowser(ctx context.Context, a *UserAuthorizer, c Caller, redirectURL string) error {
	if a == nil {
		return errors.New("no authorizer for the server")
	}
	state, verifier := rand.Text(), oauth2.GenerateVerifier()
	authz, e := a.AuthorizationURL(AuthorizationRequest{Caller: c, State: state, Verifier: verifier, RedirectURL: redirectURL})
	if e != nil {
		return e
	}
	browser := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authz.URL, nil)
	if err != nil {
		return err
	}
	resp, err := browser.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !strings.HasPrefix(back.String(), redirectURL) {
		return fmt.Errorf("the authorization server sent the browser to %q", resp.Header.Get("Location"))
	}
	q := back.Query()
	if q.Get("state") != state {
		return errors.New("the callback carries another state")
	}
	if e := a.Complete(ctx, Completion{Caller: c, Username: c.Username, Code: q.Get("code"), Verifier: verifier,
		RedirectURL: redirectURL, Issuer: authz.Issuer, Iss: q.Get("iss"), Client: authz.Client}); e != nil {
		return e
	}
	return nil
}

// The official conformance suite's authorization code scenarios, with Switchboard as
// the client of a perUser server that names no client ID: discovery of the protected
// resource and its authorization server (at each metadata location the suite tries),
// dynamic client registration, PKCE, the resource parameter, the iss parameter (RFC
// 9207, compared exactly), and the person's token on the retried call. Where the suite
// plays an attacker (another issuer in the callback or the metadata, another resource)
// the person's authorization stops with the reason named, and every check the suite
// makes of the client passes.
func TestPerUserConformanceScenarios(t *testing.T) {
	for _, sc := range []struct {
		scenario string
		refusal  string // the reason the client must stop with; "" completes
	}{
		{"auth/metadata-default", ""},
		{"auth/metadata-var1", ""},
		{"auth/iss-supported", ""},
		{"auth/iss-not-advertised", ""},
		{"auth/iss-wrong-issuer", ReasonAuthorizationFailed},
		{"auth/iss-unexpected", ReasonAuthorizationFailed},
		{"auth/iss-supported-missing", ReasonAuthorizationFailed},
		{"auth/iss-normalized", ReasonAuthorizationFailed},
		{"auth/resource-mismatch", ReasonMetadataMismatch},
		{"auth/metadata-issuer-mismatch", ReasonMetadataMismatch},
	} {
		t.Run(sc.scenario, func(t *testing.T) {
			done := "called test-tool as the person"
			if sc.refusal != "" {
				done = ""
			}
			// The session era: a person's session is opened before they authorized
			// the server (see upstream_peruser.go); --force runs the 2026-07-28 iss
			// scenarios with a server of that era.
			stdout, stderr := runClientScenario(t, perUserClientEnv, sc.scenario, done, "--spec-version", "2025-11-25", "--force")
			if sc.refusal != "" && (strings.Contains(stdout, "called test-tool") || !strings.Contains(stderr, sc.refusal)) {
				t.Errorf("the client did not stop with %s: stdout %s stderr %s", sc.refusal, stdout, stderr)
			}
			for _, secret := range []string{"test-token-", "test-client-secret", "test-auth-code"} {
				if strings.Contains(stdout+stderr, secret) {
					t.Errorf("the client's output carries %q", secret)
				}
			}
		})
	}
}
