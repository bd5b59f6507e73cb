// Package oauth holds the parts of the connector's OAuth client that judge what servers
// say and build what is sent to them, with no I/O of its own: the Bearer
// WWW-Authenticate challenge parser ([ParseChallenge]), MCP authorization discovery
// ([Discover]: RFC 9728 protected resource metadata, then RFC 8414 or OpenID
// authorization server metadata, each checked against the resource and issuer asked
// about), the canonical resource URI (RFC 8707), the token requests of the client
// credentials and JWT-bearer grants ([ClientCredentials], [JWTBearer]) with their
// signing keys and client assertions ([ParseSigningKey], [SigningKey]), the reading of
// token responses and token endpoints' error answers ([CheckToken],
// [TokenResponseError]), and the way its messages print URLs and server text
// ([DisplayURL], [SafeText]).
//
// Discovery fetches through the function its caller gives it, and token requests are
// sent by its caller: the connector's, which sends every request through the session's
// own dialer, egress decider, redirect checks and bounded bodies, and which owns the
// tokens, their renewal and the errors a session reports. Its verdicts are [Error]
// values, with a condition reason and whether they heal by themselves, which the
// connector translates into its own.
//
// It must not: do I/O itself, import the connector (which imports it) or anything above
// it, or put a query string, a header value or a token in a message.
package oauth
