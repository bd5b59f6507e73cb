package tracing

import (
	"crypto/sha256"
	"encoding/hex"

	"go.opentelemetry.io/otel/attribute"
)

// Attributes of the MCP and GenAI semantic conventions, and Switchboard's own.
const (
	MCPMethodName      = attribute.Key("mcp.method.name")
	MCPProtocolVersion = attribute.Key("mcp.protocol.version")
	MCPSessionID       = attribute.Key("mcp.session.id")
	GenAIOperationName = attribute.Key("gen_ai.operation.name")
	GenAIToolName      = attribute.Key("gen_ai.tool.name")
	JSONRPCRequestID   = attribute.Key("jsonrpc.request.id")
	NetworkTransport   = attribute.Key("network.transport")
	ErrorType          = attribute.Key("error.type")
	UserName           = attribute.Key("user.name")

	Namespace = attribute.Key("switchboard.namespace")
	Server    = attribute.Key("switchboard.server")
	Toolset   = attribute.Key("switchboard.toolset")
	Outcome   = attribute.Key("switchboard.outcome")
	// Origin is the server a toolset's call went to.
	Origin = attribute.Key("switchboard.origin")
	// AuthCached says whether a caller's authentication or authorization came from the
	// cache rather than a review.
	AuthCached = attribute.Key("switchboard.auth.cached")
	// Decision is what a policy decided (allowed, denied) and Reason why, in the words
	// of the audit line.
	Decision = attribute.Key("switchboard.decision")
	Reason   = attribute.Key("switchboard.reason")
	// Grant names how a token was acquired: client_credentials, token_exchange,
	// jwt_bearer (workload identity), enterprise_managed.
	Grant = attribute.Key("switchboard.token.grant")
	// Transport is the upstream's transport (StreamableHTTP, SSE).
	Transport = attribute.Key("switchboard.transport")
)

// maxAttributeText bounds a caller-chosen string in an attribute.
const maxAttributeText = 128

// Clip bounds a caller-chosen string for an attribute.
func Clip(s string) string {
	if len(s) <= maxAttributeText {
		return s
	}
	cut := maxAttributeText
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

// SessionID returns what a span records as mcp.session.id of a session: a digest of the
// session id, which names the session across spans without being the bearer secret the
// id is (whoever holds an Mcp-Session-Id can address the session).
func SessionID(id string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}

// OperationName returns gen_ai.operation.name of an MCP method: execute_tool for
// tools/call, "" for the others.
func OperationName(method string) string {
	if method == "tools/call" {
		return "execute_tool"
	}
	return ""
}
