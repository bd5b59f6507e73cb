// Package httpclient is the hardened HTTP client stack beneath every outbound request
// Switchboard makes on its own behalf: the connector's sessions and OAuth requests
// (connector) and the requests to identity providers' issuers (identity). It owns what
// those clients share:
//   - the transports ([NewTransports]): one for plain http and one for https, each with
//     the dial function its caller judges addresses in, TLS 1.2 or later with the roots
//     given ([SystemRoots], [RootsWith], [RootsOnly]), no proxy from the environment
//     (its dials would escape the caller's judgement), bounded connect, TLS handshake
//     and response header sizes, and small connection buffers;
//   - the bounded readers ([Body], [ReadAll]): a body that grows past its bound fails
//     with the error its caller chooses, having read at most one byte past the bound,
//     instead of being truncated silently.
//
// It decides nothing: which addresses may be dialed (egress decisions, loopback only),
// which redirects are followed and what an error says are its callers'. It must not
// import the connector or identity (both import it), log, or keep anything a request
// carries.
package httpclient
