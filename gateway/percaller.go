package gateway

import (
	"net/http"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
)

// upstreamCaller is who an upstream session opened for r acts for: the caller's identity
// key, the bearer token r carries, which a server whose credentials follow the caller
// (spec.http.auth.oauth2.tokenExchange or enterpriseManaged) exchanges for a token of the
// caller's own, and the identity provider that vouched for that token, the only one at
// whose token endpoint the connector may exchange it. The token was judged by the
// authenticator already; its expiry and provider are the authenticator's.
func upstreamCaller(r *http.Request, id *identity.Caller) *connector.Caller {
	token, _ := identity.BearerToken(r)
	return &connector.Caller{Key: id.Key, Token: token, Provider: id.Provider, Username: id.Username, Expiry: id.Expiry}
}

// openRefusalStatus is the HTTP status of a request whose upstream session could not be
// opened: 403 for a caller the server's identity provider did not vouch for (its token
// was sent nowhere; another attempt gets the same answer), 502 for everything else.
func openRefusalStatus(err error) int {
	if connector.ReasonOf(err) == connector.ReasonCallerNotAllowed {
		return http.StatusForbidden
	}
	return http.StatusBadGateway
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
