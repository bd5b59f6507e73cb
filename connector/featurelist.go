package connector

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Features are a server's resources, resource templates and prompts, listed whole.
type Features struct {
	Resources []*mcp.Resource
	Templates []*mcp.ResourceTemplate
	Prompts   []*mcp.Prompt
}

// ListFeatures lists every resource, resource template and prompt the server offers
// over cs (a go-sdk client session connected through this Upstream, a toolset's), each
// list only when the server advertised its feature, within the bounds ListTools keeps:
// the three lists share one Limits.MaxDiscoveryBytes budget, and stay charged to the
// namespace until the next ListFeatures replaces them or the Upstream closes.
func (u *Upstream) ListFeatures(ctx context.Context, cs *mcp.ClientSession) (*Features, error) {
	return listCharged(u, &u.featuresMem, func(l *lister) (*Features, error) { return listFeatures(ctx, l, cs) })
}

func listFeatures(ctx context.Context, l *lister, cs *mcp.ClientSession) (*Features, error) {
	out := &Features{}
	var caps *mcp.ServerCapabilities
	if res := cs.InitializeResult(); res != nil {
		caps = res.Capabilities
	}
	if caps == nil {
		return out, nil
	}
	// Each item is charged as its JSON encoding: it is kept whole.
	charge := func(v any) {
		data, _ := json.Marshal(v)
		l.keeper.kept += int64(len(data))
		l.keeper.sent += int64(len(data))
	}
	var err error
	if caps.Resources != nil {
		out.Resources, err = listAll(ctx, l, "resources",
			func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
				res, err := cs.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return detach(&res.Cacheable, &res.Resources), res.NextCursor, nil
			},
			func(r *mcp.Resource) *mcp.Resource { charge(r); return r })
		if err != nil {
			return nil, err
		}
		out.Templates, err = listAll(ctx, l, "resource templates",
			func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
				res, err := cs.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return detach(&res.Cacheable, &res.ResourceTemplates), res.NextCursor, nil
			},
			func(t *mcp.ResourceTemplate) *mcp.ResourceTemplate { charge(t); return t })
		if err != nil && !isMethodNotFound(err) {
			return nil, err
		}
	}
	if caps.Prompts != nil {
		out.Prompts, err = listAll(ctx, l, "prompts",
			func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
				res, err := cs.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return detach(&res.Cacheable, &res.Prompts), res.NextCursor, nil
			},
			func(p *mcp.Prompt) *mcp.Prompt { charge(p); return p })
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
