package catalog

// The types in this file are the JSON documents the catalogue returns, over REST and as
// the structured output of its MCP tools. They are built from MCPServer status only.

// ServerSummary is one MCP server in a list.
type ServerSummary struct {
	// Namespace is the MCPServer's namespace.
	Namespace string `json:"namespace" jsonschema:"namespace of the MCPServer"`
	// Name is the MCPServer's name.
	Name string `json:"name" jsonschema:"name of the MCPServer"`
	// Description is spec.description.
	Description string `json:"description,omitempty" jsonschema:"what the server is for"`
	// Labels are the MCPServer's labels.
	Labels map[string]string `json:"labels,omitempty" jsonschema:"labels of the MCPServer"`
	// Endpoint is status.endpoint: the URL the operator connects to, without user
	// information or query string.
	Endpoint string `json:"endpoint,omitempty" jsonschema:"URL of the server's MCP endpoint, without credentials or query string"`
	// Transport is status.transport: StreamableHTTP, SSE or Stdio.
	Transport string `json:"transport,omitempty" jsonschema:"wire protocol: StreamableHTTP, SSE or Stdio"`
	// ProtocolVersion is the negotiated MCP protocol version.
	ProtocolVersion string `json:"protocolVersion,omitempty" jsonschema:"negotiated MCP protocol version"`
	// Ready is true when the Ready condition is True.
	Ready bool `json:"ready" jsonschema:"true when the server is connected and its tools are discovered (and match the reviewed ones where they are pinned)"`
	// GatewayPath is where agents call the server's tools through Switchboard, on the
	// catalogue's own address and port.
	GatewayPath string `json:"gatewayPath" jsonschema:"path of the server's MCP endpoint on the Switchboard gateway, on the catalogue's address; call tools there with your own token"`
	// ServerInfo is how the server describes itself.
	ServerInfo *ServerInfo `json:"serverInfo,omitempty" jsonschema:"how the server describes itself"`
	// ToolCount is the number of published tools, including any beyond those listed.
	ToolCount int32 `json:"toolCount" jsonschema:"number of published tools"`
	// ToolsTruncated is true when the server publishes more tools than are listed.
	ToolsTruncated bool `json:"toolsTruncated,omitempty" jsonschema:"true when more tools exist than are listed"`
}

// ServerInfo is the implementation information a server reports at initialization.
type ServerInfo struct {
	// Name is the implementation's name.
	Name string `json:"name,omitempty"`
	// Version is the implementation's version.
	Version string `json:"version,omitempty"`
	// Title is the server's human-readable name.
	Title string `json:"title,omitempty"`
}

// Capabilities records which MCP features the server advertised.
type Capabilities struct {
	// Tools is true when the server offers tools.
	Tools bool `json:"tools"`
	// Resources is true when the server offers resources.
	Resources bool `json:"resources"`
	// Prompts is true when the server offers prompts.
	Prompts bool `json:"prompts"`
	// ListChanged is true when the server notifies list changes.
	ListChanged bool `json:"listChanged"`
}

// Condition is a summary of one status condition.
type Condition struct {
	// Type is the condition type, such as Ready or Connected.
	Type string `json:"type"`
	// Status is True, False or Unknown.
	Status string `json:"status"`
	// Reason is a PascalCase reason code.
	Reason string `json:"reason,omitempty"`
	// Message is the catalogue's fixed explanation of Reason. It is not the condition's
	// own message, which may name Secrets, keys or addresses: read the MCPServer for that.
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when the status last changed, in RFC 3339.
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// Tool is one published tool. Hints are the server's own claims, not guarantees.
type Tool struct {
	// Name is the tool's name, unique within its server.
	Name string `json:"name" jsonschema:"tool name, unique within its server"`
	// Title is the tool's human-readable name.
	Title string `json:"title,omitempty" jsonschema:"human-readable name"`
	// Description says what the tool does.
	Description string `json:"description,omitempty" jsonschema:"what the tool does"`
	// ReadOnlyHint is true when the server says the tool does not modify anything.
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`
	// DestructiveHint is true when the server says the tool may destroy data.
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	// IdempotentHint is true when the server says repeated calls have no further effect.
	IdempotentHint *bool `json:"idempotentHint,omitempty"`
	// OpenWorldHint is true when the server says the tool reaches outside systems.
	OpenWorldHint *bool `json:"openWorldHint,omitempty"`
}

// ServerDetail is one MCP server with its capabilities, conditions and tools.
type ServerDetail struct {
	ServerSummary
	// Capabilities are what the server advertised at initialization.
	Capabilities *Capabilities `json:"capabilities,omitempty"`
	// Conditions summarise status.conditions.
	Conditions []Condition `json:"conditions,omitempty"`
	// Tools are the published tools, sorted by name.
	Tools []Tool `json:"tools,omitempty"`
}

// ServerRef names the server a tool belongs to and says how to reach it.
type ServerRef struct {
	// Namespace is the MCPServer's namespace.
	Namespace string `json:"namespace"`
	// Name is the MCPServer's name.
	Name string `json:"name"`
	// Endpoint is the server's redacted endpoint URL.
	Endpoint string `json:"endpoint,omitempty"`
	// Transport is the server's wire protocol.
	Transport string `json:"transport,omitempty"`
	// Ready is true when the server's Ready condition is True.
	Ready bool `json:"ready"`
	// GatewayPath is where agents call the tool through Switchboard, on the catalogue's
	// own address and port.
	GatewayPath string `json:"gatewayPath"`
}

// ToolMatch is one search result: a tool and the server that offers it.
type ToolMatch struct {
	Tool
	// Server is the server that offers the tool.
	Server ServerRef `json:"server"`
}

// ServerList is a page of servers in stable (namespace, name) order.
type ServerList struct {
	// Items are the servers of this page.
	Items []ServerSummary `json:"items"`
	// Continue, when set, is passed back as the continue parameter to get the next page.
	Continue string `json:"continue,omitempty"`
}

// ToolList is a page of ranked tool matches.
type ToolList struct {
	// Items are the matches of this page, best first.
	Items []ToolMatch `json:"items"`
	// Continue, when set, is passed back as the continue parameter to get the next page.
	Continue string `json:"continue,omitempty"`
}

// Error is the JSON body of every error response.
type Error struct {
	// Code is the HTTP status code.
	Code int `json:"code"`
	// Reason is a PascalCase reason, such as BadRequest or Unauthorized.
	Reason string `json:"reason"`
	// Message says what went wrong.
	Message string `json:"message"`
}
