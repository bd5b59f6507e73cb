package connector

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"time"
	"unique"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// discovered is the outcome of one full discovery: only what status, the catalogue and
// the tools digest need, every string scrubbed of the config's secrets, cut to its
// bound and copied out of the decoder's buffers, so that nothing the server sent is
// kept beyond what is accounted for.
type discovered struct {
	serverInfo        ServerInfo
	instructions      string
	tools             []Tool
	digest            string
	resources         []Resource
	resourceTemplates []ResourceTemplate
	prompts           []Prompt
	at                time.Time
}

// discover lists everything the server offers: tools always, resources, resource
// templates and prompts when advertised. Every list is bounded in pages and items,
// every page in time, and what the lists carry in bytes; a repeated cursor ends
// discovery with LimitExceeded. What is kept is charged to mem, the session's share of
// the pool's memory budget, and each page is charged while it is decoded; on success the
// new lists replace the old ones in mem, on failure mem is as before. red takes the
// secrets, configured and issued (OAuth tokens), out of the server's text.
func discover(ctx context.Context, cs *mcp.ClientSession, cfg Config, red redactor, mem *lease) (_ *discovered, err error) {
	defer func() {
		if err != nil {
			mem.abort()
		}
	}()
	res := cs.InitializeResult()
	if res == nil {
		res = &mcp.InitializeResult{}
	}
	caps := res.Capabilities
	if caps == nil {
		caps = &mcp.ServerCapabilities{}
	}
	l := &lister{cfg: cfg, budget: cfg.Limits.MaxDiscoveryBytes, mem: mem}
	k := &l.keeper
	k.red, k.max = red, cfg.Limits.MaxDescriptionBytes
	out := &discovered{instructions: k.text(res.Instructions)}
	if si := res.ServerInfo; si != nil {
		out.serverInfo = ServerInfo{Name: k.text(si.Name), Title: k.text(si.Title), Version: k.text(si.Version)}
	}
	// The go-sdk session keeps its initialize result, whole, for as long as it lives.
	kept, sent, _ := k.take()
	if err := l.keep(kept + sent); err != nil { // nothing is held yet: all from the budget
		return nil, err
	}

	out.tools, err = listAll(ctx, l, "tools",
		func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
			res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
			if err != nil {
				return nil, "", err
			}
			return detach(&res.Cacheable, &res.Tools), res.NextCursor, nil
		},
		func(t *mcp.Tool) Tool { return convertTool(t, k) })
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
				return detach(&res.Cacheable, &res.Resources), res.NextCursor, nil
			},
			func(r *mcp.Resource) Resource {
				return Resource{URI: k.name(r.URI), Name: k.name(r.Name), Title: k.text(r.Title), Description: k.text(r.Description), MIMEType: k.text(r.MIMEType)}
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
				return detach(&res.Cacheable, &res.ResourceTemplates), res.NextCursor, nil
			},
			func(r *mcp.ResourceTemplate) ResourceTemplate {
				return ResourceTemplate{URITemplate: k.name(r.URITemplate), Name: k.name(r.Name), Title: k.text(r.Title), Description: k.text(r.Description), MIMEType: k.text(r.MIMEType)}
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
				return detach(&res.Cacheable, &res.Prompts), res.NextCursor, nil
			},
			func(p *mcp.Prompt) Prompt {
				return Prompt{Name: k.name(p.Name), Title: k.text(p.Title), Description: k.text(p.Description)}
			})
		if err != nil {
			return nil, err
		}
	}
	out.at = time.Now()
	mem.commit()
	return out, nil
}

// detach takes the items out of a list result and returns them. go-sdk caches the list
// results of a 2026-07-28 session, per cursor, for as long as the session lives: left in
// place, every decoded page (schemas as maps of generic values) would stay on the heap
// beside the snapshot. Taken out, a page is garbage once converted. Its time-to-live is
// zeroed too, so that go-sdk never answers a later list from the emptied entry but drops
// it and asks the server. Only for a session nobody calls tools on: go-sdk's CallTool
// reads the cached tool pages under its own lock (see Upstream.ListTools).
func detach[T any](c *mcp.Cacheable, items *[]T) []T {
	c.TTLMs = 0
	out := *items
	*items = nil
	return out
}

// keeper turns server-provided strings into what a snapshot keeps: secrets redacted
// (before cutting, so no cut leaves a secret's prefix behind), text cut to the
// description limit, and a copy of its own so the decoder's buffers can be freed. It
// sums, until take, the bytes it keeps, the bytes the server sent and of those the
// schema bytes.
type keeper struct {
	red                redactor
	max                int
	kept, sent, schema int64
}

// text keeps free text: titles, descriptions, instructions, versions.
func (k *keeper) text(s string) string {
	k.sent += int64(len(s))
	return k.keep(TruncateUTF8(k.red.redact(s), k.max))
}

// name keeps an identifier (a tool name, a URI), which is never cut.
func (k *keeper) name(s string) string {
	k.sent += int64(len(s))
	return k.keep(k.red.redact(s))
}

// keep copies s out of the decoder's buffers, as its canonical copy (unique.Make): the
// servers of a fleet often run the same server, and their tool names, descriptions and
// schema digests are then held once, however many snapshots list them. The budget is
// charged for every copy all the same.
func (k *keeper) keep(s string) string {
	if s == "" {
		return ""
	}
	k.kept += int64(len(s))
	return unique.Make(s).Value()
}

// take returns the sums since the last take.
func (k *keeper) take() (kept, sent, schema int64) {
	kept, sent, schema = k.kept, k.sent, k.schema
	k.kept, k.sent, k.schema = 0, 0, 0
	return kept, sent, schema
}

// lister carries the bounds shared by the lists of one discovery.
type lister struct {
	cfg    Config
	budget int64 // bytes the lists may still carry, across all lists
	mem    *lease
	keeper keeper
	// pageCharge is what the next page is expected to cost while decoded; zero before
	// the first page of a list.
	pageCharge int64
	// held is what is still held for the page being converted.
	held int64
}

// Decoding a page costs a multiple of what it carries: the response body or event,
// go-sdk's copy of the JSON-RPC result and the decoded values, alive together.
const decodeFactor = 4

// minPageCharge is the least a page is charged.
const minPageCharge = 256 << 10

// firstPageShare divides a namespace's share into what the first page of a list is
// charged, before anything is known of the server's pages: at most this many first pages
// of one namespace are decoded at once.
const firstPageShare = 8

// hold charges the page about to be fetched: the first page of a list a part of the
// namespace share (no more than the largest page the limits allow), later pages what the
// previous page cost. It waits while other discoveries hold the budget, until ctx is
// done. A page may cost more than it was charged; the next page of the list is then
// charged what it cost.
func (l *lister) hold(ctx context.Context) (int64, error) {
	charge := l.pageCharge
	if charge == 0 {
		worst := decodeFactor * max(l.cfg.Limits.MaxResponseBytes, int64(l.cfg.Limits.MaxEventBytes))
		charge = min(worst, l.mem.budget.nsLimit/firstPageShare)
	}
	return l.mem.hold(ctx, max(charge, minPageCharge))
}

// learn records what the page just converted carried, to charge the next page of the
// list: its sent bytes times decodeFactor, no more than the namespace share.
func (l *lister) learn(sent int64) {
	l.pageCharge = min(sent*decodeFactor, l.mem.budget.nsLimit)
}

// keep charges n kept bytes to the session's lease, partly out of what is held for the
// page being converted: its items become what is kept.
func (l *lister) keep(n int64) error {
	used, err := l.mem.grow(l.held, n)
	if err != nil {
		return err
	}
	l.held -= used
	return nil
}

// listAll follows a paginated list to its end within the configured bounds, converting
// each page as it arrives so that only the converted items are kept. convert keeps
// strings through l.keeper.
func listAll[T, Out any](ctx context.Context, l *lister, what string,
	page func(context.Context, string) ([]T, string, error), convert func(T) Out,
) ([]Out, error) {
	var (
		items  []Out
		cursor string
		seen   = make(map[string]struct{})
		limits = l.cfg.Limits
		// Each item costs its struct in the slice, and the slice may have grown to
		// twice what it holds.
		itemSize = 2 * int64(reflect.TypeFor[Out]().Size()) //nolint:gosec // a struct of a few words
	)
	l.pageCharge = 0
	for pages := 1; ; pages++ {
		if pages > limits.MaxPages {
			return nil, newError(ReasonLimitExceeded, "server listed %s over more than %d pages", what, limits.MaxPages)
		}
		// The page is charged from before it is requested until it is converted,
		// which is as long as its decoded form is alive.
		// Waiting for the budget counts against the page's timeout, so that two
		// discoveries cannot wait on each other for ever.
		callCtx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		held, err := l.hold(callCtx)
		if err != nil {
			cancel()
			return nil, err
		}
		l.held = held
		got, next, err := page(callCtx, cursor)
		cancel()
		if err == nil && len(items)+len(got) > limits.MaxItems {
			err = newError(ReasonLimitExceeded, "server listed more than %d %s", limits.MaxItems, what)
		}
		if err != nil {
			l.mem.unhold(l.held)
			return nil, err
		}
		sentPage := int64(0)
		for _, item := range got {
			converted := convert(item)
			kept, sent, schema := l.keeper.take()
			sentPage += sent
			// The per-server bound counts what is kept, and schemas as sent.
			if l.budget -= kept + schema; l.budget < 0 {
				err = newError(ReasonLimitExceeded, "server's lists take more than %d bytes", limits.MaxDiscoveryBytes)
				break
			}
			if err = l.keep(kept + itemSize); err != nil {
				break
			}
			items = append(items, converted)
		}
		l.mem.unhold(l.held)
		l.held = 0
		l.learn(sentPage)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return items, nil
		}
		if _, dup := seen[next]; dup {
			return nil, newError(ReasonLimitExceeded, "server repeated a pagination cursor while listing %s", what)
		}
		seen[next] = struct{}{}
		cursor = strings.Clone(next)
	}
}

func isMethodNotFound(err error) bool {
	var rpcErr *jsonrpc.Error
	return errors.As(err, &rpcErr) && rpcErr.Code == jsonrpc.CodeMethodNotFound
}

// convertTool keeps what status, the catalogue and the digest need of t. Schemas are
// kept only as their digest: they are what a tool costs most, and nothing but the
// digest reads them.
func convertTool(t *mcp.Tool, k *keeper) Tool {
	out := Tool{
		Name:        k.name(t.Name),
		Title:       k.text(t.Title),
		Description: k.text(t.Description),
	}
	if a := t.Annotations; a != nil {
		out.ReadOnlyHint = a.ReadOnlyHint
		out.DestructiveHint = cloneBool(a.DestructiveHint)
		out.IdempotentHint = a.IdempotentHint
		out.OpenWorldHint = cloneBool(a.OpenWorldHint)
		if out.Title == "" {
			out.Title = k.text(a.Title)
		}
	}
	var n int
	out.SchemaDigest, n = schemaDigest(t.InputSchema, t.OutputSchema)
	if out.SchemaDigest != "" {
		out.SchemaDigest = unique.Make(out.SchemaDigest).Value()
	}
	k.kept += int64(len(out.SchemaDigest))
	k.sent += int64(n)
	k.schema += int64(n)
	return out
}

func cloneBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}

// schemaDigest returns "sha256:<hex>" over the input and output schemas, re-encoded:
// go-sdk decodes them into generic values and encoding/json sorts map keys, so equal
// schemas digest equally. It also returns the length of the encodings. A tool with
// neither schema has no digest.
func schemaDigest(input, output any) (string, int) {
	if input == nil && output == nil {
		return "", 0
	}
	h := sha256.New()
	n := 0
	for _, v := range []any{input, output} {
		data, err := json.Marshal(v)
		if err != nil || v == nil {
			data = []byte("null")
		}
		n += len(data)
		_, _ = h.Write(data) // hashes never fail to write
		_, _ = h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n
}

// ToolsDigest returns "sha256:<hex>" over the JSON of tools in order (schemas by their
// digest), so it changes exactly when a tool a user would see changes, schemas
// included. Snapshot.ToolsDigest is this over all of a server's tools; callers that
// publish a filtered list digest that list the same way.
func ToolsDigest(tools []Tool) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, t := range tools {
		_ = enc.Encode(t) // encoding these plain structs cannot fail
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
