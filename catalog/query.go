package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Page sizes and query bounds shared by REST and MCP.
const (
	// DefaultLimit is the page size when a request sets none.
	DefaultLimit = 50
	// MaxLimit is the largest page size a request may ask for.
	MaxLimit = 500
	// MaxQueryLength bounds a search query, in bytes.
	MaxQueryLength = 256
)

// apiError is an error with the HTTP status it maps to. Its message is safe to return.
type apiError struct {
	code int
	msg  string
	// challenge, for a 401, is the WWW-Authenticate value; the REST realm when empty.
	challenge string
}

func (e *apiError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) *apiError {
	return &apiError{code: code, msg: fmt.Sprintf(format, args...)}
}

// serverQuery selects servers.
type serverQuery struct {
	namespace string
	selector  labels.Selector
	transport string
	ready     *bool
	limit     int
	cont      string
}

// toolQuery selects and ranks tools.
type toolQuery struct {
	q         string
	namespace string
	readOnly  *bool
	ready     *bool
	limit     int
	cont      string
}

func checkNamespace(ns string) *apiError {
	if ns == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return errorf(http.StatusBadRequest, "namespace %q is not valid: %s", ns, strings.Join(errs, "; "))
	}
	return nil
}

func checkLimit(limit int) (int, *apiError) {
	switch {
	case limit == 0:
		return DefaultLimit, nil
	case limit < 0 || limit > MaxLimit:
		return 0, errorf(http.StatusBadRequest, "limit must be between 1 and %d", MaxLimit)
	default:
		return limit, nil
	}
}

func checkTransport(t string) *apiError {
	switch mcpv1alpha1.Transport(t) {
	case "", mcpv1alpha1.TransportStreamableHTTP, mcpv1alpha1.TransportSSE, mcpv1alpha1.TransportStdio:
		return nil
	}
	return errorf(http.StatusBadRequest, "transport must be one of %s, %s or %s",
		mcpv1alpha1.TransportStreamableHTTP, mcpv1alpha1.TransportSSE, mcpv1alpha1.TransportStdio)
}

// visible returns the namespaces the caller may see: the one asked for (403 when it may
// not list mcpservers there) or every namespace it may list.
func (s *Server) visible(ctx context.Context, c *caller, namespace string) (scope, *apiError) {
	if namespace != "" {
		if c.all {
			return scope{all: true}, nil
		}
		ok, err := s.gate.allowed(ctx, c, namespace)
		if err != nil {
			s.log.Error(err, "Authorization check failed")
			return scope{}, errorf(http.StatusInternalServerError, "authorization check failed")
		}
		if !ok {
			return scope{}, errorf(http.StatusForbidden, "%s cannot list mcpservers in namespace %q", c.Username, namespace)
		}
		return scope{ns: map[string]struct{}{namespace: {}}}, nil
	}
	sc, err := s.gate.scope(ctx, c, s.index.Namespaces())
	if err != nil {
		s.log.Error(err, "Authorization check failed")
		return scope{}, errorf(http.StatusInternalServerError, "authorization check failed")
	}
	return sc, nil
}

// listServers answers GET /api/v1/servers and the list_servers tool.
func (s *Server) listServers(ctx context.Context, c *caller, q serverQuery) (*ServerList, *apiError) {
	if err := checkNamespace(q.namespace); err != nil {
		return nil, err
	}
	if err := checkTransport(q.transport); err != nil {
		return nil, err
	}
	limit, aerr := checkLimit(q.limit)
	if aerr != nil {
		return nil, aerr
	}
	sel := q.selector
	if sel == nil {
		sel = labels.Everything()
	}
	fp := fingerprint("servers", q.namespace, sel.String(), q.transport, boolString(q.ready))
	var after *serverKey
	if q.cont != "" {
		var cur cursor
		if err := decodeCursor(q.cont, fp, &cur); err != nil {
			return nil, err
		}
		after = &serverKey{namespace: cur.Namespace, name: cur.Name}
	}
	sc, aerr := s.visible(ctx, c, q.namespace)
	if aerr != nil {
		return nil, aerr
	}
	entries, more := s.index.listServers(after, limit, func(e *serverEntry) bool {
		d := e.detail
		return sc.allows(d.Namespace) &&
			(q.namespace == "" || d.Namespace == q.namespace) &&
			(q.transport == "" || d.Transport == q.transport) &&
			(q.ready == nil || d.Ready == *q.ready) &&
			sel.Matches(labels.Set(d.Labels))
	})
	out := &ServerList{Items: make([]ServerSummary, 0, len(entries))}
	for _, e := range entries {
		out.Items = append(out.Items, e.detail.ServerSummary)
	}
	if more && len(entries) > 0 {
		last := entries[len(entries)-1].key
		out.Continue = encodeCursor(fp, cursor{Namespace: last.namespace, Name: last.name})
	}
	return out, nil
}

// getServer answers GET /api/v1/namespaces/{ns}/servers/{name} and the get_server tool.
func (s *Server) getServer(ctx context.Context, c *caller, namespace, name string) (*ServerDetail, *apiError) {
	if namespace == "" || name == "" {
		return nil, errorf(http.StatusBadRequest, "namespace and name are required")
	}
	if err := checkNamespace(namespace); err != nil {
		return nil, err
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, errorf(http.StatusBadRequest, "name %q is not valid: %s", name, strings.Join(errs, "; "))
	}
	if _, err := s.visible(ctx, c, namespace); err != nil {
		return nil, err
	}
	e, ok := s.index.get(serverKey{namespace: namespace, name: name})
	if !ok {
		return nil, errorf(http.StatusNotFound, "mcpserver %q not found in namespace %q", name, namespace)
	}
	return e.detail, nil
}

// searchTools answers GET /api/v1/tools and the search_tools tool.
func (s *Server) searchTools(ctx context.Context, c *caller, q toolQuery) (*ToolList, *apiError) {
	if len(q.q) > MaxQueryLength {
		return nil, errorf(http.StatusBadRequest, "q must be at most %d bytes", MaxQueryLength)
	}
	if err := checkNamespace(q.namespace); err != nil {
		return nil, err
	}
	limit, aerr := checkLimit(q.limit)
	if aerr != nil {
		return nil, aerr
	}
	pq := parseQuery(q.q)
	fp := fingerprint("tools", strings.Join(pq.terms, " "), strings.ToLower(pq.raw), q.namespace, boolString(q.readOnly), boolString(q.ready))
	var after *toolCursor
	if q.cont != "" {
		var cur cursor
		if err := decodeCursor(q.cont, fp, &cur); err != nil {
			return nil, err
		}
		after = &toolCursor{score: cur.Score, key: serverKey{namespace: cur.Namespace, name: cur.Name}, tool: cur.Tool}
	}
	sc, aerr := s.visible(ctx, c, q.namespace)
	if aerr != nil {
		return nil, aerr
	}
	matches, more := s.index.searchTools(pq, after, limit, func(t *toolEntry) bool {
		return sc.allows(t.server.key.namespace) &&
			(q.namespace == "" || t.server.key.namespace == q.namespace) &&
			(q.ready == nil || t.server.detail.Ready == *q.ready) &&
			(q.readOnly == nil || isTrue(t.tool.ReadOnlyHint) == *q.readOnly)
	})
	out := &ToolList{Items: make([]ToolMatch, 0, len(matches))}
	for _, m := range matches {
		out.Items = append(out.Items, ToolMatch{Tool: *m.tool.tool, Server: m.tool.server.ref()})
	}
	if more && len(matches) > 0 {
		last := matches[len(matches)-1]
		out.Continue = encodeCursor(fp, cursor{
			Score:     last.score,
			Namespace: last.tool.server.key.namespace,
			Name:      last.tool.server.key.name,
			Tool:      last.tool.tool.Name,
		})
	}
	return out, nil
}

func isTrue(b *bool) bool { return b != nil && *b }

func boolString(b *bool) string {
	if b == nil {
		return ""
	}
	return strconv.FormatBool(*b)
}

// cursor is the decoded form of a continue token: the position of the last item of the
// previous page, and the fingerprint of the query it belongs to. Keyset positions keep
// pages stable while servers come and go: no item is returned twice and no item that
// stays put is skipped.
type cursor struct {
	Version     int    `json:"v"`
	Fingerprint string `json:"f"`
	Score       int64  `json:"s,omitempty"`
	Namespace   string `json:"ns"`
	Name        string `json:"n"`
	Tool        string `json:"t,omitempty"`
}

const cursorVersion = 1

// fingerprint identifies a query's filters, so a continue token cannot be replayed
// against another query.
func fingerprint(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func encodeCursor(fp string, c cursor) string {
	c.Version = cursorVersion
	c.Fingerprint = fp
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("catalog: encoding a cursor: %v", err)) // plain strings and numbers cannot fail
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(token, fp string, c *cursor) *apiError {
	invalid := errorf(http.StatusBadRequest, "continue token is invalid or belongs to another query; start again without it")
	if len(token) > 1024 {
		return invalid
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return invalid
	}
	if err := json.Unmarshal(b, c); err != nil || c.Version != cursorVersion || c.Fingerprint != fp {
		return invalid
	}
	return nil
}
