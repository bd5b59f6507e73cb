package gateway_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// An endpoint that requires authentication answers an authenticated caller: a shared
// cache must not hand the answer to anyone else, so its caching hints say private,
// whatever the server said, through a server of either era and through a toolset.
func TestAnAuthenticatedEndpointAnswersPrivate(t *testing.T) {
	authenticated := func(o *gateway.Options) {
		var reviews atomic.Int32
		o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
		o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
	}
	sessionlessAt := func(t *testing.T, endpoint string) *mcp.ClientSession {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token: callerToken}}, MaxRetries: -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: sessionlessVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	for _, upstream := range []struct {
		name      string
		stateless bool
	}{{"server with sessions", false}, {"sessionless server", true}} {
		t.Run(upstream.name, func(t *testing.T) {
			h := newHarness(t, harnessOptions{statelessUpstream: upstream.stateless, gateway: authenticated})
			h.upstream.mcp.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					res, err := next(ctx, method, req)
					if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
						list.CacheScope, list.TTLMs = "public", 60000
					}
					return res, err
				}
			})
			for era, cs := range map[string]*mcp.ClientSession{sessionlessVersion: sessionlessAt(t, h.url()), sessionEra: h.connect(nil)} {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := cs.ListTools(ctx, nil)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if res.CacheScope != "private" {
					t.Errorf("%s client: tools/list of an authenticated caller answered cacheScope %q; want private", era, res.CacheScope)
				}
			}
		})
	}
	t.Run("toolset", func(t *testing.T) {
		h := newToolsetHarness(t, authenticated)
		cs := sessionlessAt(t, h.front.URL+gatewaypath.Toolset(namespace, "support-agent"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.CacheScope != "private" {
			t.Errorf("tools/list of a toolset answered an authenticated caller cacheScope %q; want private", res.CacheScope)
		}
	})
}
