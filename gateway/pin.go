package gateway

import (
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
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
		return fmt.Sprintf("tool %s is not among the pinned tools of MCPServer %s/%s (spec.tools.pinnedDigest)", quoteName(tool), srv.namespace, srv.name)
	}
	return ""
}

// servedRefusal judges tools an upstream connection served (after the tool policy): each
// must be a pinned tool, unchanged, and a complete list must digest to the pin, as
// status.toolsDigest does. It says why not, or "".
func (p *pinnedTools) servedRefusal(served []connector.Tool, complete bool, srv *server) string {
	if p.refusal != "" {
		return p.refusal
	}
	for _, t := range served {
		if pinned, ok := p.byName[t.Name]; !ok || !reflect.DeepEqual(pinned, t) {
			return fmt.Sprintf("MCPServer %s/%s served a definition of tool %s that differs from the pinned tools (spec.tools.pinnedDigest): "+
				"its tools are withheld and its calls refused", srv.namespace, srv.name, quoteName(t.Name))
		}
	}
	if complete {
		sorted := slices.SortedFunc(slices.Values(served), func(a, b connector.Tool) int { return strings.Compare(a.Name, b.Name) })
		if digest := connector.ToolsDigest(sorted); digest != srv.pinned {
			return fmt.Sprintf("MCPServer %s/%s served tools whose digest %s is not the pinned %s: its tools are withheld and its calls refused",
				srv.namespace, srv.name, digest, srv.pinned)
		}
	}
	return ""
}

// pinWatch is what the pin remembers of one upstream connection: a session's upstream
// session, a toolset origin's, or the upstream client the sessionless front door relays
// through. It remembers, for the pin it was judged against, whether a complete list the
// connection served matched the pin, and why its calls are refused once one did not.
type pinWatch struct {
	mu     sync.Mutex
	pinned string // the spec.tools.pinnedDigest judged against
	why    string // why the connection's calls are refused; "" while none
	judged bool   // a complete list the connection served matched pinned
}

// state returns why calls are refused and whether a list matched, under pinned: what
// was remembered under another pin counts for nothing.
func (w *pinWatch) state(pinned string) (why string, judged bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pinned != pinned {
		return "", false
	}
	return w.why, w.judged
}

// breach keeps why the connection's calls are refused under pinned, if nothing was kept
// yet, and reports whether it was the first.
func (w *pinWatch) breach(pinned, why string) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pinned == pinned && w.why != "" {
		return false
	}
	w.pinned, w.why, w.judged = pinned, why, false
	return true
}

// matched records that a complete list the connection served matched pinned.
func (w *pinWatch) matched(pinned string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pinned != pinned {
		w.pinned, w.why = pinned, ""
	}
	w.judged = w.why == ""
}

// forget drops a match: the connection said its tools changed, so its next call is
// judged on a list again. A breach stays.
func (w *pinWatch) forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.judged = false
}

// pinCheck is one question to the pin about an upstream connection of a pinned server:
// about a tools/list answer the connection served (listed is set), or about a call of
// tool through it. Every path and era asks it the same way (judgePin).
type pinCheck struct {
	srv  *server
	conn *pinWatch
	// audit writes the connection's "Tools withheld" line, with who (key-value pairs)
	// besides what audit itself names.
	audit logr.Logger
	who   []any

	// listed are the tools of a tools/list answer, as the connector converts them
	// (before or after the tool policy: the hidden ones are not judged), complete when
	// they are every page of it.
	listed   []connector.Tool
	isList   bool
	complete bool
	// tool is the tool called, when listed is not set.
	tool string
}

// judgePin is the pin's one decision, the same for a session, a sessionless request
// (through an upstream session or straight to a server of that era) and a toolset's
// origin: it says why a tools/list answer is withheld or a call refused, or "".
//
// A list that is not the pinned tools is withheld, and from then on every call through
// the connection that served it is refused: the first such list writes one audit line,
// "Tools withheld", and the refusal's reason is the same words in every era. A call is
// otherwise refused when its tool is not among the pinned ones.
func (g *Gateway) judgePin(c pinCheck) string {
	if c.srv.pinned == "" {
		return ""
	}
	pinned := g.pinnedSet(c.srv)
	if !c.isList {
		if why, _ := c.conn.state(c.srv.pinned); why != "" {
			return why
		}
		return pinned.callRefusal(c.tool, c.srv)
	}
	published := slices.DeleteFunc(slices.Clone(c.listed), func(t connector.Tool) bool { return c.srv.toolRefusal(t.Name) != "" })
	why := pinned.servedRefusal(published, c.complete, c.srv)
	if why == "" {
		if c.complete {
			c.conn.matched(c.srv.pinned)
		}
		return ""
	}
	if c.conn.breach(c.srv.pinned, why) {
		c.audit.Info("Tools withheld", append(c.who, "reason", why)...)
	}
	return why
}

// withheld is the error a client gets for a tools/list answer the pin withheld, alike in
// both eras.
func withheld(why string) *jsonrpc.Error { return &jsonrpc.Error{Code: codeUnavailable, Message: why} }

// quoteName quotes a name a caller or server chose, clipped, for a reason that may be
// audited and recorded in a span.
func quoteName(name string) string { return strconv.Quote(tracing.Clip(name)) }

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
