// Package oauth holds the parts of the connector's OAuth client that judge what servers
// say, with no I/O of its own: the Bearer WWW-Authenticate challenge parser
// ([ParseChallenge]), MCP authorization discovery ([Discover]: RFC 9728 protected
// resource metadata, then RFC 8414 or OpenID authorization server metadata, each checked
// against the resource and issuer asked about), the canonical resource URI (RFC 8707)
// and the way its messages print URLs a server sent.
//
// Discovery fetches through the function its caller gives it: the connector's, which
// sends every request through the session's own dialer, egress decider, redirect checks
// and bounded bodies. The grants themselves (client credentials, JWT-bearer, token
// exchange, the authorization code flow) stay in the connector, which owns the tokens
// and the errors a session reports.
//
// It must not: do I/O itself, import the connector (which imports it) or anything above
// it, or put a query string, a header value or a token in a message.
package oauth
