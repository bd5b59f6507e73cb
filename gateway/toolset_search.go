package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The two tools a toolset in Search mode serves instead of its whole list.
const (
	findToolsName = "find_tools"
	callToolName  = "call_tool"
)

// Bounds of find_tools.
const (
	defaultFindLimit = 10
	maxFindLimit     = 50
)

// ToolIndex ranks a fixed set of tools by a query, for a toolset's find_tools: the names
// of at most limit tools that match query, best first; an empty query matches every tool,
// in name order. It is immutable once built and safe for concurrent use. The manager's
// comes from the catalogue (catalog.NewToolIndex), so that find_tools ranks a toolset's
// tools the way the catalogue's search_tools ranks a server's.
type ToolIndex interface {
	Search(query string, limit int) []string
}

// IndexedTool is one tool a ToolIndex is built over: its exposed name, title and
// description, and Extra, more text to find it by (the words of its input schema).
type IndexedTool struct {
	Name, Title, Description, Extra string
}

// searchTools is a Search-mode toolset session's view of its exposed tools: their
// definitions and a ToolIndex over them.
type searchTools struct {
	defs  map[string]*mcp.Tool
	index ToolIndex
}

func newSearchTools(newIndex func([]IndexedTool) ToolIndex, exposed map[string]*mcp.Tool) *searchTools {
	items := make([]IndexedTool, 0, len(exposed))
	for name, t := range exposed {
		items = append(items, IndexedTool{Name: name, Title: t.Title, Description: t.Description, Extra: schemaWords(t.InputSchema)})
	}
	return &searchTools{defs: exposed, index: newIndex(items)}
}

// schemaWords returns the property names and descriptions of an input schema, for the
// index.
func schemaWords(schema any) string {
	raw, err := json.Marshal(schema)
	if err != nil {
		return ""
	}
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		b.WriteString(name + " " + s.Properties[name].Description + " ")
	}
	return b.String()
}

// tools returns the definitions of find_tools and call_tool.
func (st *searchTools) tools() map[string]*mcp.Tool {
	return map[string]*mcp.Tool{
		findToolsName: {
			Name: findToolsName,
			Description: fmt.Sprintf("Finds the tools of this toolset (%d in all) that match a query, best first, with their "+
				"descriptions and input schemas. Call one with %s.", len(st.defs), callToolName),
			InputSchema: json.RawMessage(`{"type":"object","properties":{` +
				`"query":{"type":"string","description":"words to look for in tool names, titles, descriptions and parameters"},` +
				`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"at most this many tools (default 10)"}},` +
				`"required":["query"]}`),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		},
		callToolName: {
			Name:        callToolName,
			Description: "Calls a tool of this toolset that " + findToolsName + " found, by name, with its arguments.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{` +
				`"name":{"type":"string","description":"the tool's name, as find_tools gave it"},` +
				`"arguments":{"type":"object","description":"the tool's arguments, as its input schema says"}},` +
				`"required":["name"]}`),
		},
	}
}

// foundTool is one find_tools result.
type foundTool struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	InputSchema any    `json:"inputSchema,omitempty"`
}

// searchHandler returns the handler of find_tools or call_tool.
func (s *toolsetSession) searchHandler(name string) mcp.ToolHandler {
	if name == findToolsName {
		return s.findTools
	}
	return s.callFound
}

func (s *toolsetSession) currentSearch() *searchTools {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.search
}

// findTools answers find_tools from the session's index.
func (s *toolsetSession) findTools(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Query string `json:"query"`
		Limit int    `json:"limit"`
	}
	if len(req.Params.Arguments) > 0 {
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "find_tools: " + err.Error()}
		}
	}
	limit := in.Limit
	if limit <= 0 {
		limit = defaultFindLimit
	}
	limit = min(limit, maxFindLimit)
	st := s.currentSearch()
	found := []foundTool{}
	if st != nil {
		for _, name := range st.index.Search(in.Query, limit) {
			t := st.defs[name]
			found = append(found, foundTool{Name: name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema})
		}
	}
	out := map[string]any{"tools": found}
	text, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: out}, nil
}

// callFound answers call_tool: the named exposed tool, through the same checks as a
// direct call.
func (s *toolsetSession) callFound(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil || in.Name == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "call_tool needs the name of a tool find_tools found"}
	}
	return s.callExposed(ctx, req, &mcp.CallToolParamsRaw{Meta: req.Params.Meta, Name: in.Name, Arguments: in.Arguments,
		InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
}
