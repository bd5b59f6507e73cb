package connector

import (
	"slices"
	"time"
)

// State is where a session is in its life.
type State string

const (
	// StateConnecting means a session is being established and nothing is known yet,
	// or a reconnect is under way after the session went down.
	StateConnecting State = "Connecting"
	// StateReady means the session is live, discovered and its probes pass (a failing
	// probe below the failure threshold keeps it Ready, with ConsecutiveFailures > 0).
	StateReady State = "Ready"
	// StateDown means the last connect failed, or probes failed failureThreshold times
	// in a row; the session is waiting to reconnect with backoff.
	StateDown State = "Down"
)

// States lists every State, for metrics.
var States = []State{StateConnecting, StateReady, StateDown}

// Transport names the transport a session uses.
type Transport string

const (
	// TransportStreamableHTTP is the Streamable HTTP transport.
	TransportStreamableHTTP Transport = "StreamableHTTP"
	// TransportSSE is the legacy HTTP+SSE transport.
	TransportSSE Transport = "SSE"
)

// Snapshot is what the connector knows about one server at one moment. It is a copy:
// callers may keep and modify it. Everything in it is fit for status: no header value,
// no query string. Every string the server provided (names, titles, descriptions,
// instructions, server info, URIs) has the config's secrets replaced by "[redacted]",
// so a server that echoes its credential cannot publish it; free text (everything but
// names and URIs) is cut to the description limit.
type Snapshot struct {
	// State is the session state.
	State State
	// Endpoint is the configured URL as scheme://host:port/path.
	Endpoint string
	// Transport is the transport in use or last used; empty before the first connect.
	Transport Transport
	// ProtocolVersion is the negotiated MCP protocol version, e.g. "2025-11-25".
	ProtocolVersion string
	// ServerInfo is what the server says about itself, each field cut to the
	// description limit.
	ServerInfo ServerInfo
	// Instructions are the server's instructions, cut to the description limit.
	Instructions string
	// Capabilities are what the server advertises.
	Capabilities Capabilities
	// Discovered is true once a discovery has completed for the current config. The
	// discovered fields below keep their last values while the session is down, so a
	// brief outage does not empty the catalogue.
	Discovered bool
	// Tools are the server's tools, sorted by name, titles and descriptions cut to the
	// limit.
	Tools []Tool
	// ToolsDigest is "sha256:<hex>" over the canonical JSON of Tools; it changes exactly
	// when the tool list a user would see changes.
	ToolsDigest string
	// Resources, ResourceTemplates and Prompts list the other offerings, when the
	// server advertises them.
	Resources         []Resource
	ResourceTemplates []ResourceTemplate
	Prompts           []Prompt
	// ToolsPerCaller says the server's tools are discovered per caller: its credentials
	// follow the gateway's caller and the operator holds none of its own to call it
	// with, so the session checked the server's metadata only and Tools is empty.
	ToolsPerCaller bool
	// TokenEndpoint is the origin (scheme://host:port) of the OAuth token endpoint the
	// session's bearer token came from; empty when the config has no OAuth2 or the
	// server has not asked for a token.
	TokenEndpoint string
	// LastError is the most recent failure; nil once the session is healthy again.
	LastError *Error
	// ConsecutiveFailures counts failed connects or probes since the last success.
	ConsecutiveFailures int
	// ConnectedAt is when the current session was established; zero when not connected.
	ConnectedAt time.Time
	// DiscoveredAt is when the current lists were fetched.
	DiscoveredAt time.Time
}

// ServerInfo identifies the server implementation.
type ServerInfo struct {
	Name    string
	Title   string
	Version string
}

// Capabilities are the server capabilities the controller reports.
type Capabilities struct {
	Tools, Resources, Prompts bool
	// ListChanged is true when the server promises list_changed notifications for any
	// of the lists it offers.
	ListChanged bool
	// Completions is true when the server offers argument completion.
	Completions bool
	// ResourcesSubscribe is true when the server lets clients subscribe to resource
	// updates.
	ResourcesSubscribe bool
}

// Tool is one tool definition.
type Tool struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	// Annotation hints; nil pointers mean the server did not say.
	ReadOnlyHint    bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
	// SchemaDigest is "sha256:<hex>" over the tool's input and output schemas. The
	// schemas themselves are not kept: nothing that reads a snapshot needs them, and a
	// server's schemas can weigh tens of MiB. Empty when the server sent neither.
	SchemaDigest string `json:"schemaDigest,omitempty"`
}

// Resource is one resource.
type Resource struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
}

// ResourceTemplate is one resource template.
type ResourceTemplate struct {
	URITemplate string `json:"uriTemplate"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MIMEType    string `json:"mimeType,omitempty"`
}

// Prompt is one prompt.
type Prompt struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
}

// clone returns a deep enough copy: slices are copied; strings are immutable and
// shared.
func (s Snapshot) clone() Snapshot {
	s.Tools = slices.Clone(s.Tools)
	s.Resources = slices.Clone(s.Resources)
	s.ResourceTemplates = slices.Clone(s.ResourceTemplates)
	s.Prompts = slices.Clone(s.Prompts)
	if s.LastError != nil {
		e := *s.LastError
		s.LastError = &e
	}
	return s
}

// noticeablyDifferent reports whether a and b differ in anything a user would notice,
// which is when the pool emits an event. Timestamps alone do not count.
func noticeablyDifferent(a, b Snapshot) bool {
	if a.State != b.State || a.Endpoint != b.Endpoint || a.Transport != b.Transport ||
		a.ProtocolVersion != b.ProtocolVersion || a.ServerInfo != b.ServerInfo ||
		a.Instructions != b.Instructions || a.Capabilities != b.Capabilities ||
		a.Discovered != b.Discovered || a.ToolsDigest != b.ToolsDigest || a.ToolsPerCaller != b.ToolsPerCaller ||
		a.ConsecutiveFailures != b.ConsecutiveFailures || a.TokenEndpoint != b.TokenEndpoint ||
		!a.ConnectedAt.Equal(b.ConnectedAt) {
		return true
	}
	if (a.LastError == nil) != (b.LastError == nil) ||
		(a.LastError != nil && *a.LastError != *b.LastError) {
		return true
	}
	return !slices.Equal(a.Resources, b.Resources) ||
		!slices.Equal(a.ResourceTemplates, b.ResourceTemplates) ||
		!slices.Equal(a.Prompts, b.Prompts)
}
