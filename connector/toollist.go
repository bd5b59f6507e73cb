package connector

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ListTools lists every tool of the server over cs, a go-sdk client session connected
// through this Upstream (a toolset's), within the bounds the connector's own discovery
// keeps: Limits.MaxPages pages, Limits.MaxItems tools, Limits.MaxDiscoveryBytes bytes of
// definitions, no repeated cursor, and each page charged to the namespace's share of the
// pool's discovery memory budget while it is fetched and decoded. So a hostile server
// cannot make one caller's list grow the manager's memory without bound, nor crowd out
// other namespaces' discoveries. The definitions are returned whole, schemas included,
// and stay charged to the namespace until the next ListTools replaces them or the
// Upstream closes. Errors beyond a bound are *Error with reason LimitExceeded.
func (u *Upstream) ListTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	return listCharged(u, &u.toolsMem, func(l *lister) ([]*mcp.Tool, error) {
		return listAll(ctx, l, "tools",
			func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
				res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				// Left in go-sdk's cache, not detached: the caller calls tools on the same
				// session while it lists, and go-sdk's CallTool reads the cached pages (for
				// their Mcp-Param headers) under a lock this package cannot take. The copy
				// is bounded like the list: one more page set per session.
				return res.Tools, res.NextCursor, nil
			},
			func(t *mcp.Tool) *mcp.Tool {
				// The whole definition is kept: it is charged as its JSON encoding.
				n := int64(toolBytes(t))
				l.keeper.kept += n
				l.keeper.sent += n
				return t
			})
	})
}

// listCharged runs list, an Upstream's listing within the connector's discovery bounds,
// charging what it returns to the namespace's discovery budget through the lease *mem
// (made on first use): the charge replaces the previous listing's, and stays until the
// next one or the Upstream closes. A failed listing gives back what it reserved; its
// error is scrubbed of the session's secrets.
func listCharged[T any](u *Upstream, mem **lease, list func(*lister) (T, error)) (T, error) {
	s := u.owner
	u.mu.Lock()
	if *mem == nil {
		*mem = s.pool.memory.lease(u.key.Namespace)
	}
	lease := *mem
	u.mu.Unlock()
	out, err := list(&lister{cfg: s.cfg, budget: s.cfg.Limits.MaxDiscoveryBytes, mem: lease})
	if err != nil {
		lease.abort()
		var zero T
		if e, ok := errors.AsType[*Error](err); ok {
			return zero, u.red.scrubError(e)
		}
		return zero, err
	}
	lease.commit()
	return out, nil
}

// toolBytes is the size of t's JSON encoding.
func toolBytes(t *mcp.Tool) int {
	data, err := json.Marshal(t)
	if err != nil {
		return 0
	}
	return len(data)
}

// ConvertTools converts tool definitions this Upstream's session was served into the
// form Snapshot.Tools has (secrets redacted, text cut to the description limit, schemas
// by their digest), so that what a gateway session was served can be digested with
// ToolsDigest and judged against a pinned digest exactly as the connector's own
// discovery is.
func (u *Upstream) ConvertTools(tools []*mcp.Tool) []Tool {
	return u.owner.convertTools(tools)
}

func (s *session) convertTools(tools []*mcp.Tool) []Tool {
	k := &keeper{red: s.red, max: s.cfg.Limits.MaxDescriptionBytes}
	out := make([]Tool, 0, len(tools))
	for _, t := range tools {
		if t != nil {
			out = append(out, convertTool(t, k))
		}
	}
	return out
}
