package connector

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// discovered is the outcome of one full discovery.
type discovered struct {
	tools             []Tool
	digest            string
	resources         []Resource
	resourceTemplates []ResourceTemplate
	prompts           []Prompt
	at                time.Time
}

// discover lists everything the server offers: tools always, resources, resource
// templates and prompts when advertised. Every list is bounded in pages and items,
// every page in time, and what is kept of all lists together in bytes; a repeated
// cursor ends discovery with LimitExceeded.
func discover(ctx context.Context, cs *mcp.ClientSession, cfg Config) (*discovered, error) {
	caps := &mcp.ServerCapabilities{}
	if res := cs.InitializeResult(); res != nil && res.Capabilities != nil {
		caps = res.Capabilities
	}
	cut := func(s string) string { return TruncateUTF8(s, cfg.Limits.MaxDescriptionBytes) }
	l := &lister{cfg: cfg, budget: cfg.Limits.MaxDiscoveryBytes}
	out := &discovered{}
	var err error

	out.tools, err = listAll(ctx, l, "tools",
		func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
			res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.Tools, res.NextCursor, nil
		},
		func(t *mcp.Tool) (Tool, int) {
			tool := convertTool(t, cut)
			return tool, len(tool.Name) + len(tool.Title) + len(tool.Description) + len(tool.InputSchema) + len(tool.OutputSchema)
		})
	if err != nil && (caps.Tools != nil || !isMethodNotFound(err)) {
		return nil, err
	}
	slices.SortFunc(out.tools, func(a, b Tool) int { return cmp.Compare(a.Name, b.Name) })
	out.digest = ToolsDigest(out.tools)

	if caps.Resources != nil {
		out.resources, err = listAll(ctx, l, "resources",
			func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
				res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Resources, res.NextCursor, nil
			},
			func(r *mcp.Resource) (Resource, int) {
				out := Resource{URI: r.URI, Name: r.Name, Title: r.Title, Description: cut(r.Description), MIMEType: r.MIMEType}
				return out, len(out.URI) + len(out.Name) + len(out.Title) + len(out.Description) + len(out.MIMEType)
			})
		if err != nil {
			return nil, err
		}
		out.resourceTemplates, err = listAll(ctx, l, "resource templates",
			func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
				res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.ResourceTemplates, res.NextCursor, nil
			},
			func(r *mcp.ResourceTemplate) (ResourceTemplate, int) {
				out := ResourceTemplate{URITemplate: r.URITemplate, Name: r.Name, Title: r.Title, Description: cut(r.Description), MIMEType: r.MIMEType}
				return out, len(out.URITemplate) + len(out.Name) + len(out.Title) + len(out.Description) + len(out.MIMEType)
			})
		if err != nil && !isMethodNotFound(err) {
			return nil, err
		}
	}

	if caps.Prompts != nil {
		out.prompts, err = listAll(ctx, l, "prompts",
			func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
				res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Prompts, res.NextCursor, nil
			},
			func(p *mcp.Prompt) (Prompt, int) {
				out := Prompt{Name: p.Name, Title: p.Title, Description: cut(p.Description)}
				return out, len(out.Name) + len(out.Title) + len(out.Description)
			})
		if err != nil {
			return nil, err
		}
	}
	out.at = time.Now()
	return out, nil
}

// lister carries the bounds shared by the lists of one discovery.
type lister struct {
	cfg    Config
	budget int64 // bytes still allowed to be kept, across all lists
}

// listAll follows a paginated list to its end within the configured bounds, converting
// each page as it arrives so that only the converted items are kept.
func listAll[T, Out any](ctx context.Context, l *lister, what string,
	page func(context.Context, string) ([]T, string, error), convert func(T) (Out, int),
) ([]Out, error) {
	var (
		items  []Out
		cursor string
		seen   = make(map[string]struct{})
		limits = l.cfg.Limits
	)
	for pages := 1; ; pages++ {
		if pages > limits.MaxPages {
			return nil, newError(ReasonLimitExceeded, "server listed %s over more than %d pages", what, limits.MaxPages)
		}
		callCtx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		got, next, err := page(callCtx, cursor)
		cancel()
		if err != nil {
			return nil, err
		}
		if len(items)+len(got) > limits.MaxItems {
			return nil, newError(ReasonLimitExceeded, "server listed more than %d %s", limits.MaxItems, what)
		}
		for _, item := range got {
			converted, size := convert(item)
			if l.budget -= int64(size); l.budget < 0 {
				return nil, newError(ReasonLimitExceeded, "server's lists take more than %d bytes", limits.MaxDiscoveryBytes)
			}
			items = append(items, converted)
		}
		if next == "" {
			return items, nil
		}
		if _, dup := seen[next]; dup {
			return nil, newError(ReasonLimitExceeded, "server repeated a pagination cursor while listing %s", what)
		}
		seen[next] = struct{}{}
		cursor = next
	}
}

func isMethodNotFound(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound
}

func convertTool(t *mcp.Tool, cut func(string) string) Tool {
	out := Tool{
		Name:         t.Name,
		Title:        t.Title,
		Description:  cut(t.Description),
		InputSchema:  rawJSON(t.InputSchema),
		OutputSchema: rawJSON(t.OutputSchema),
	}
	if a := t.Annotations; a != nil {
		out.ReadOnlyHint = a.ReadOnlyHint
		out.DestructiveHint = a.DestructiveHint
		out.IdempotentHint = a.IdempotentHint
		out.OpenWorldHint = a.OpenWorldHint
		if out.Title == "" {
			out.Title = a.Title
		}
	}
	return out
}

// rawJSON re-encodes a schema go-sdk decoded into a generic value. encoding/json sorts
// map keys, so equal schemas encode equally and the digest is stable.
func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return data
}

// ToolsDigest returns "sha256:<hex>" over the JSON of tools in order, so it changes
// exactly when a tool a user would see changes. Snapshot.ToolsDigest is this over all of
// a server's tools; callers that publish a filtered list digest that list the same way.
func ToolsDigest(tools []Tool) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, t := range tools {
		_ = enc.Encode(t) // encoding these plain structs cannot fail
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
