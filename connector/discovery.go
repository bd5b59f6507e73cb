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
// templates and prompts when advertised. Every list is bounded in pages and items and
// every page in time; a repeated cursor ends discovery with LimitExceeded.
func discover(ctx context.Context, cs *mcp.ClientSession, cfg Config) (*discovered, error) {
	caps := &mcp.ServerCapabilities{}
	if res := cs.InitializeResult(); res != nil && res.Capabilities != nil {
		caps = res.Capabilities
	}
	l := cfg.Limits
	cut := func(s string) string { return truncateUTF8(s, l.MaxDescriptionBytes) }
	out := &discovered{}

	tools, err := listAll(ctx, cfg, "tools", func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.Tools, res.NextCursor, nil
	})
	if err != nil && (caps.Tools != nil || !isMethodNotFound(err)) {
		return nil, err
	}
	for _, t := range tools {
		out.tools = append(out.tools, convertTool(t, cut))
	}
	slices.SortFunc(out.tools, func(a, b Tool) int { return cmp.Compare(a.Name, b.Name) })
	out.digest = toolsDigest(out.tools)

	if caps.Resources != nil {
		resources, err := listAll(ctx, cfg, "resources", func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
			res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.Resources, res.NextCursor, nil
		})
		if err != nil {
			return nil, err
		}
		for _, r := range resources {
			out.resources = append(out.resources, Resource{
				URI: r.URI, Name: r.Name, Title: r.Title, Description: cut(r.Description), MIMEType: r.MIMEType,
			})
		}
		templates, err := listAll(ctx, cfg, "resource templates", func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
			res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.ResourceTemplates, res.NextCursor, nil
		})
		if err != nil && !isMethodNotFound(err) {
			return nil, err
		}
		for _, r := range templates {
			out.resourceTemplates = append(out.resourceTemplates, ResourceTemplate{
				URITemplate: r.URITemplate, Name: r.Name, Title: r.Title, Description: cut(r.Description), MIMEType: r.MIMEType,
			})
		}
	}

	if caps.Prompts != nil {
		prompts, err := listAll(ctx, cfg, "prompts", func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
			res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return res.Prompts, res.NextCursor, nil
		})
		if err != nil {
			return nil, err
		}
		for _, p := range prompts {
			out.prompts = append(out.prompts, Prompt{Name: p.Name, Title: p.Title, Description: cut(p.Description)})
		}
	}
	out.at = time.Now()
	return out, nil
}

// listAll follows a paginated list to its end, within the configured bounds.
func listAll[T any](ctx context.Context, cfg Config, what string, page func(context.Context, string) ([]T, string, error)) ([]T, error) {
	var (
		items  []T
		cursor string
		seen   = make(map[string]struct{})
	)
	for pages := 1; ; pages++ {
		if pages > cfg.Limits.MaxPages {
			return nil, newError(ReasonLimitExceeded, "server listed %s over more than %d pages", what, cfg.Limits.MaxPages)
		}
		callCtx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		got, next, err := page(callCtx, cursor)
		cancel()
		if err != nil {
			return nil, err
		}
		if len(items)+len(got) > cfg.Limits.MaxItems {
			return nil, newError(ReasonLimitExceeded, "server listed more than %d %s", cfg.Limits.MaxItems, what)
		}
		items = append(items, got...)
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

// toolsDigest is "sha256:<hex>" over the canonical JSON of tools sorted by name.
func toolsDigest(tools []Tool) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, t := range tools {
		_ = enc.Encode(t) // encoding these plain structs cannot fail
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
