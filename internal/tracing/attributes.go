package tracing

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

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

// Bounds of what an attribute (or an audit line: the gateway's use the same) may quote
// of a string a caller or an upstream chooses.
const (
	// MaxName bounds a name or an id: a tool name, a method, a request id, a protocol
	// version.
	MaxName = 128
	// MaxText bounds any other text: a reason (which quotes names clipped to MaxName), an
	// error, a user name. Kubernetes' longest user name, a ServiceAccount's, fits.
	MaxText = 1 << 10
)

// Clip bounds a caller-chosen name for an attribute (see ClipTo): at most MaxName bytes.
func Clip(s string) string { return ClipTo(s, MaxName) }

// ClipText bounds caller- or upstream-chosen text for an attribute (see ClipTo): at most
// MaxText bytes.
func ClipText(s string) string { return ClipTo(s, MaxText) }

// ClipTo returns s as at most n bytes of valid UTF-8: bytes that are not UTF-8 become
// U+FFFD, and a longer s is cut at a character boundary and ends in a marker that says it
// was clipped and from how many bytes ("…[clipped from 4194304 bytes]"). A short, valid
// s is returned as it is, without copying.
func ClipTo(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	size := len(s)
	if size > n+utf8.UTFMax {
		// No need to look at what cannot be kept.
		s = s[:n+utf8.UTFMax]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n && size <= n {
		return s
	}
	marker := "…[clipped from " + strconv.Itoa(size) + " bytes]"
	if len(marker) > n {
		marker = "" // no room to say so
	}
	for len(s) > n-len(marker) {
		_, last := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-last]
	}
	return s + marker
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
