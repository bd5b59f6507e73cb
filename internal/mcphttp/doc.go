// Package mcphttp holds the HTTP front-door checks that the bridge and the gateway make
// before they hand a Streamable HTTP request to a go-sdk StreamableServerTransport: the
// ones go-sdk's StreamableHTTPHandler makes, which neither can use because both relay
// raw messages instead of serving through an mcp.Server.
//
// It owns content negotiation (Accept, Content-Type), bounded and deadline-bound body
// reads, DNS rebinding protection for loopback listeners, and the error answers a
// client must see before a session exists (JSON-RPC errors, plain 404s for a session
// that is gone). It must not frame JSON-RPC itself (it encodes one error response with
// go-sdk's jsonrpc package), keep sessions, or know about Kubernetes.
package mcphttp
