package gateway

import (
	"net/http"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/connector"
)

// upstreamCaller is who an upstream session opened for r acts for: the caller's identity
// key and the bearer token r carries, which a server whose credentials follow the caller
// (spec.http.auth.oauth2.tokenExchange or enterpriseManaged) exchanges for a token of the
// caller's own. The token was judged by the authenticator already; its expiry is the
// authenticator's.
func upstreamCaller(r *http.Request, id *catalog.Identity) *connector.Caller {
	token, _ := catalog.BearerToken(r)
	return &connector.Caller{Key: id.Key, Token: token, Expiry: id.Expiry}
}

// presentCaller gives the connector the caller's newest token for each of the servers
// keys names whose credentials follow the caller, before a request of the caller's is
// relayed to it: the upstream token renewed on its behalf is then exchanged from a token
// that is still alive, and one obtained from a token since replaced is not used past the
// old token's expiry.
func (g *Gateway) presentCaller(c *connector.Caller, keys ...connector.Key) {
	for _, key := range keys {
		if g.opts.Pool.PerCaller(key) {
			g.opts.Pool.PresentCaller(key, *c)
		}
	}
}
