package gateway

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
)

// pinnedTools are the tools a server with spec.tools.pinnedDigest may serve through the
// gateway: those the connector discovered, after the server's tool policy, while their
// digest is the pinned one. A gateway session's own tools/list answer is judged against
// them, because a server can tell agents from the operator (by clientInfo, by timing)
// and serve them other tools than the ones that were reviewed and pinned.
type pinnedTools struct {
	// refusal says why nothing may be served (the discovered tools are not the pinned
	// ones); empty when byName holds the pinned tools.
	refusal string
	byName  map[string]connector.Tool
}

// pinnedSet returns the server's pinned tools, computed once per picture of the server:
// a new status digest comes with a new picture.
func (g *Gateway) pinnedSet(srv *server) *pinnedTools {
	srv.pinOnce.Do(func() {
		srv.pin = g.computePinnedSet(srv)
	})
	return srv.pin
}

func (g *Gateway) computePinnedSet(srv *server) *pinnedTools {
	if why := srv.pinRefusal(); why != "" {
		return &pinnedTools{refusal: why}
	}
	snap, ok := g.opts.Pool.Snapshot(connector.Key{Namespace: srv.namespace, Name: srv.name})
	if !ok || !snap.Discovered {
		return &pinnedTools{refusal: fmt.Sprintf("the tools of MCPServer %s/%s are pinned and not discovered yet", srv.namespace, srv.name)}
	}
	published := slices.DeleteFunc(snap.Tools, func(t connector.Tool) bool { return srv.toolRefusal(t.Name) != "" })
	if digest := connector.ToolsDigest(published); digest != srv.pinned {
		return &pinnedTools{refusal: fmt.Sprintf("the tools of MCPServer %s/%s changed since they were pinned (spec.tools.pinnedDigest %s, discovered %s): "+
			"tool calls are refused until someone reviews the tools and pins the new digest", srv.namespace, srv.name, srv.pinned, digest)}
	}
	p := &pinnedTools{byName: make(map[string]connector.Tool, len(published))}
	for _, t := range published {
		p.byName[t.Name] = t
	}
	return p
}

// callRefusal says why tool may not be called under the pin: it is not a pinned tool.
func (p *pinnedTools) callRefusal(tool string, srv *server) string {
	if p.refusal != "" {
		return p.refusal
	}
	if _, ok := p.byName[tool]; !ok {
		return fmt.Sprintf("tool %q is not among the pinned tools of MCPServer %s/%s (spec.tools.pinnedDigest)", tool, srv.namespace, srv.name)
	}
	return ""
}

// servedRefusal judges tools a session was served (after the tool policy): each must be
// a pinned tool, unchanged, and a complete list must digest to the pin, as
// status.toolsDigest does. It says why not, or "".
func (p *pinnedTools) servedRefusal(served []connector.Tool, complete bool, srv *server) string {
	if p.refusal != "" {
		return p.refusal
	}
	for _, t := range served {
		if pinned, ok := p.byName[t.Name]; !ok || !reflect.DeepEqual(pinned, t) {
			return fmt.Sprintf("MCPServer %s/%s served this session a definition of tool %q that differs from the pinned tools (spec.tools.pinnedDigest): "+
				"its tools are withheld and its calls refused", srv.namespace, srv.name, t.Name)
		}
	}
	if complete {
		sorted := slices.SortedFunc(slices.Values(served), func(a, b connector.Tool) int { return strings.Compare(a.Name, b.Name) })
		if digest := connector.ToolsDigest(sorted); digest != srv.pinned {
			return fmt.Sprintf("MCPServer %s/%s served this session tools whose digest %s is not the pinned %s: its tools are withheld and its calls refused",
				srv.namespace, srv.name, digest, srv.pinned)
		}
	}
	return ""
}

// pinBreach remembers why a session, or a toolset's origin, was served tools that are
// not the pinned ones: its calls are refused from then on.
type pinBreach struct {
	mu  sync.Mutex
	why string
}

// record keeps why, if nothing was kept yet, and reports whether it was the first.
func (b *pinBreach) record(why string) (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.why != "" {
		return false
	}
	b.why = why
	return true
}

// reason says why calls are refused, or "".
func (b *pinBreach) reason() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.why
}

// servedTools strictly decodes the tools of a tools/list result (as the client's exact
// reader reads them), and its next cursor.
func servedTools(result []byte) ([]*mcp.Tool, string, error) {
	if err := mcpmsg.Check(result); err != nil {
		return nil, "", fmt.Errorf("malformed tools/list result from the server: %w", err)
	}
	var r struct {
		Tools      []*mcp.Tool `json:"tools"`
		NextCursor string      `json:"nextCursor"`
	}
	if err := jsonv2.Unmarshal(result, &r); err != nil {
		return nil, "", fmt.Errorf("malformed tools/list result from the server: %w", err)
	}
	return r.Tools, r.NextCursor, nil
}
