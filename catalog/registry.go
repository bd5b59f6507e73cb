package catalog

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	apiv0 "github.com/modelcontextprotocol/registry/pkg/api/v0"
	"github.com/modelcontextprotocol/registry/pkg/model"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
)

// The MCP Registry API (https://github.com/modelcontextprotocol/registry, the generic
// registry API of docs/reference/api/openapi.yaml), served under /v0.1 from the same
// informer events as the rest of the catalogue. Each MCPServer and each MCPToolset is one
// server.json whose only remote is its endpoint on the gateway; a caller sees the entries
// it may use (the gateway's check, verb use on the object), whether or not it may list
// mcpservers in their namespace: a registry is where agents find what they can call, and
// an entry it could not call is of no use to it. A request reviews at most
// maxRegistryReviews objects; a page cut short by that ends with a cursor.

// RegistryPathPrefix starts every path of the MCP Registry API the catalogue serves.
const RegistryPathPrefix = "/v0.1"

// DefaultRegistryNamePrefix is the reverse-DNS part of every registry name when
// Options.RegistryNamePrefix is empty.
const DefaultRegistryNamePrefix = "dev.switchboard.local"

// RegistryStatusKey is the key of Switchboard's status in each answer's _meta.
const RegistryStatusKey = "dev.switchboard/status"

// ToolsetNameMarker starts the part after the namespace in a toolset's registry name;
// Kubernetes names have no underscore, so no MCPServer's name can start with it.
const ToolsetNameMarker = "toolset_"

// Registry page sizes and bounds, as the official registry has them.
const (
	// DefaultRegistryLimit is the page size of GET /v0.1/servers when none is asked for.
	DefaultRegistryLimit = 30
	// MaxRegistryLimit is the largest page size GET /v0.1/servers accepts.
	MaxRegistryLimit = 100

	// maxRegistryName is the registry's limit on a server name.
	maxRegistryName = 200
	// maxRegistryPrefix bounds the configured name prefix.
	maxRegistryPrefix = 100
	// maxRegistryDescription and maxRegistryTitle are the registry's limits, in
	// characters.
	maxRegistryDescription = 100
	maxRegistryTitle       = 100
)

// registryPrefixPattern is the registry's rule for the part of a name before the slash.
var registryPrefixPattern = regexp.MustCompile(`^[a-zA-Z0-9.-]+$`)

// CheckRegistryNamePrefix reports whether prefix can start registry names: the part of
// a name before its slash, as the registry's schema allows it (letters, digits, dots and
// hyphens), at most 100 bytes.
func CheckRegistryNamePrefix(prefix string) error {
	if len(prefix) > maxRegistryPrefix || !registryPrefixPattern.MatchString(prefix) {
		return fmt.Errorf("registry name prefix %q must be 1 to %d letters, digits, dots or hyphens, such as com.example.prod", prefix, maxRegistryPrefix)
	}
	return nil
}

// RegistryServerName returns the registry name of an MCPServer:
// <prefix>/<namespace>.<name>.
func RegistryServerName(prefix, namespace, name string) string {
	return prefix + "/" + namespace + "." + name
}

// RegistryToolsetName returns the registry name of an MCPToolset:
// <prefix>/<namespace>.toolset_<name>.
func RegistryToolsetName(prefix, namespace, name string) string {
	return prefix + "/" + namespace + "." + ToolsetNameMarker + name
}

// RegistryStatus is Switchboard's status of an entry, in its answer's _meta under
// RegistryStatusKey.
type RegistryStatus struct {
	// Kind is MCPServer or MCPToolset.
	Kind string `json:"kind"`
	// Namespace and Name name the object.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Ready is true when the object's Ready condition is True.
	Ready bool `json:"ready"`
	// ToolCount is status.toolCount: the tools the server publishes, or the toolset
	// exposes (before the caller's RBAC).
	ToolCount int32 `json:"toolCount"`
	// Transport is how the operator reaches an MCPServer (StreamableHTTP, SSE or Stdio);
	// empty for a toolset. Clients always reach the entry over Streamable HTTP at its
	// remote.
	Transport string `json:"transport,omitempty"`
	// GatewayPath is the path of the entry's endpoint on the gateway.
	GatewayPath string `json:"gatewayPath"`
	// ServerInfo is how an MCPServer describes itself at initialization.
	ServerInfo *ServerInfo `json:"serverInfo,omitempty"`
}

// registryResponseMeta is a ServerResponse's _meta: the registry's own metadata and
// Switchboard's status beside it, under its namespaced key. The registry's Go type holds
// only its own key, so this type embeds it.
type registryResponseMeta struct {
	apiv0.ResponseMeta
	Switchboard *RegistryStatus `json:"dev.switchboard/status,omitempty"`
}

// registryServerResponse is apiv0.ServerResponse with Switchboard's _meta.
type registryServerResponse struct {
	Server apiv0.ServerJSON     `json:"server"`
	Meta   registryResponseMeta `json:"_meta"`
}

// registryKind says which resource an entry is, and is the resource RBAC is asked
// about.
type registryKind string

const (
	registryKindServer  registryKind = "mcpservers"
	registryKindToolset registryKind = "mcptoolsets"
)

// registryKey identifies an entry's object.
type registryKey struct {
	kind registryKind
	serverKey
}

// registryRecord is one entry, immutable once in the index: its answer is encoded when
// the object changes, never per request.
type registryRecord struct {
	key     registryKey
	name    string // registry name
	lname   string // name in lower case, for search
	version string
	updated time.Time

	// content is the entry's answer encoded without its timestamps, to tell a change
	// of the entry from an event that changed nothing it shows.
	content []byte
	// body is the ServerResponse as the API answers it.
	body []byte
}

// registryIndex holds the entries in name order.
type registryIndex struct {
	mu     sync.RWMutex
	byKey  map[registryKey]*registryRecord
	byName map[string]*registryRecord
	list   []*registryRecord // sorted by name
	now    func() time.Time
}

func newRegistryIndex() *registryIndex {
	return &registryIndex{
		byKey:  map[registryKey]*registryRecord{},
		byName: map[string]*registryRecord{},
		now:    time.Now,
	}
}

// registryBuilder turns objects into entries: the name prefix and the gateway's public
// base URL are the manager's configuration.
type registryBuilder struct {
	prefix string
	base   string // public base URL without a trailing slash; "" gives no remotes
}

// entry is an entry before it gets its updatedAt: its answer and the time the object
// itself says it last changed.
type registryEntry struct {
	key      registryKey
	response registryServerResponse
	changed  time.Time
}

// server returns the entry of an MCPServer, or false when its name would exceed the
// registry's limit. It reads the object's status, labels-free metadata and
// spec.description only: never spec.http (URL, headers, Secrets), spec.stdio or
// annotations.
func (b registryBuilder) server(o *mcpv1alpha1.MCPServer) (registryEntry, bool) {
	name := RegistryServerName(b.prefix, o.Namespace, o.Name)
	if len(name) > maxRegistryName {
		return registryEntry{}, false
	}
	st := &o.Status
	path := gatewaypath.Server(o.Namespace, o.Name)
	status := &RegistryStatus{
		Kind: string(mcpv1alpha1.AccessPolicyTargetMCPServer), Namespace: o.Namespace, Name: o.Name,
		Ready:     isReady(st.Conditions),
		ToolCount: st.ToolCount, Transport: string(st.Transport), GatewayPath: path,
	}
	title := ""
	if st.ServerInfo != nil {
		status.ServerInfo = &ServerInfo{Name: st.ServerInfo.Name, Version: st.ServerInfo.Version, Title: st.ServerInfo.Title}
		title = st.ServerInfo.Title
	}
	e := b.entry(registryKey{registryKindServer, serverKey{o.Namespace, o.Name}}, name, path,
		o.Spec.Description, "MCP server "+o.Namespace+"/"+o.Name+" through the Switchboard gateway", title,
		&o.ObjectMeta, st.Conditions, status)
	return e, true
}

// toolset returns the entry of an MCPToolset, or false when its name would exceed the
// registry's limit.
func (b registryBuilder) toolset(o *mcpv1alpha1.MCPToolset) (registryEntry, bool) {
	name := RegistryToolsetName(b.prefix, o.Namespace, o.Name)
	if len(name) > maxRegistryName {
		return registryEntry{}, false
	}
	path := gatewaypath.Toolset(o.Namespace, o.Name)
	status := &RegistryStatus{
		Kind: string(mcpv1alpha1.AccessPolicyTargetMCPToolset), Namespace: o.Namespace, Name: o.Name,
		Ready:       meta.IsStatusConditionPresentAndEqual(o.Status.Conditions, mcpv1alpha1.ConditionReady, metav1.ConditionTrue),
		ToolCount:   o.Status.ToolCount,
		GatewayPath: path,
	}
	return b.entry(registryKey{registryKindToolset, serverKey{o.Namespace, o.Name}}, name, path,
		o.Spec.Description, "MCP toolset "+o.Namespace+"/"+o.Name+" through the Switchboard gateway", "",
		&o.ObjectMeta, o.Status.Conditions, status), true
}

func (b registryBuilder) entry(key registryKey, name, path, description, fallback, title string,
	om *metav1.ObjectMeta, conds []metav1.Condition, status *RegistryStatus) registryEntry {
	description = strings.Join(strings.Fields(description), " ")
	if description == "" {
		description = fallback
	}
	srv := apiv0.ServerJSON{
		Schema:      model.CurrentSchemaURL,
		Name:        name,
		Description: cut(description, maxRegistryDescription),
		Title:       cut(strings.TrimSpace(title), maxRegistryTitle),
		Version:     "0.0." + strconv.FormatInt(max(om.Generation, 0), 10),
	}
	if b.base != "" {
		srv.Remotes = []model.Transport{{Type: model.TransportTypeStreamableHTTP, URL: b.base + path}}
	}
	changed := om.CreationTimestamp.Time
	for i := range conds {
		if t := conds[i].LastTransitionTime.Time; t.After(changed) {
			changed = t
		}
	}
	return registryEntry{
		key: key,
		response: registryServerResponse{
			Server: srv,
			Meta: registryResponseMeta{
				ResponseMeta: apiv0.ResponseMeta{Official: &apiv0.RegistryExtensions{
					Status:          model.StatusActive,
					StatusChangedAt: om.CreationTimestamp.UTC(),
					PublishedAt:     om.CreationTimestamp.UTC(),
					IsLatest:        true,
				}},
				Switchboard: status,
			},
		},
		changed: changed.UTC(),
	}
}

// cut shortens s to at most n characters, ending it with an ellipsis when it was longer.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

// upsert adds or replaces the entry of e's object. Its updatedAt is the latest of the
// object's creation and its conditions' last transitions, or, when this replica saw the
// entry's answer change without either moving (a new generation, a new tool count), the
// time it saw the change.
func (ix *registryIndex) upsert(e registryEntry) {
	official := e.response.Meta.Official
	official.UpdatedAt = time.Time{}
	content, err := json.Marshal(e.response)
	if err != nil {
		panic(fmt.Sprintf("catalog: encoding a registry entry: %v", err)) // strings, numbers and times cannot fail
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	old := ix.byKey[e.key]
	updated := e.changed
	switch {
	case old == nil:
	case bytes.Equal(old.content, content):
		updated = maxTime(updated, old.updated)
	default:
		updated = maxTime(updated, ix.now().UTC().Truncate(time.Millisecond))
	}
	official.UpdatedAt = updated
	body, err := json.Marshal(e.response)
	if err != nil {
		panic(fmt.Sprintf("catalog: encoding a registry entry: %v", err))
	}
	rec := &registryRecord{
		key: e.key, name: e.response.Server.Name, lname: strings.ToLower(e.response.Server.Name),
		version: e.response.Server.Version, updated: updated, content: content, body: body,
	}
	if old != nil {
		ix.removeLocked(old)
	}
	ix.byKey[rec.key] = rec
	ix.byName[rec.name] = rec
	i, _ := slices.BinarySearchFunc(ix.list, rec.name, func(r *registryRecord, name string) int { return strings.Compare(r.name, name) })
	ix.list = slices.Insert(ix.list, i, rec)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// delete removes the entry of key's object, if any.
func (ix *registryIndex) delete(key registryKey) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if old := ix.byKey[key]; old != nil {
		ix.removeLocked(old)
	}
}

func (ix *registryIndex) removeLocked(rec *registryRecord) {
	delete(ix.byKey, rec.key)
	delete(ix.byName, rec.name)
	if i, ok := slices.BinarySearchFunc(ix.list, rec.name, func(r *registryRecord, name string) int { return strings.Compare(r.name, name) }); ok {
		ix.list = slices.Delete(ix.list, i, i+1)
	}
}

// get returns the entry named name.
func (ix *registryIndex) get(name string) *registryRecord {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.byName[name]
}

// after returns up to n entries named after name ("" from the start) that keep passes,
// and the name of the last entry looked at ("" when the list ended).
func (ix *registryIndex) after(name string, n int, keep func(*registryRecord) bool) ([]*registryRecord, string) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	i, found := slices.BinarySearchFunc(ix.list, name, func(r *registryRecord, name string) int { return strings.Compare(r.name, name) })
	if found {
		i++
	}
	var out []*registryRecord
	for ; i < len(ix.list); i++ {
		if !keep(ix.list[i]) {
			continue
		}
		out = append(out, ix.list[i])
		if len(out) == n {
			return out, ix.list[i].name
		}
	}
	return out, ""
}

// registryEventHandlers keep the registry's entries in step with the MCPServer and
// MCPToolset informers.
func (s *Server) registryServerHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(
		func(o *mcpv1alpha1.MCPServer) {
			if e, ok := s.registryBuild.server(o); ok {
				s.registry.upsert(e)
			}
		},
		func(o *mcpv1alpha1.MCPServer) {
			s.registry.delete(registryKey{registryKindServer, serverKey{o.Namespace, o.Name}})
		})
}

func (s *Server) registryToolsetHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(
		func(o *mcpv1alpha1.MCPToolset) {
			if e, ok := s.registryBuild.toolset(o); ok {
				s.registry.upsert(e)
			}
		},
		func(o *mcpv1alpha1.MCPToolset) {
			s.registry.delete(registryKey{registryKindToolset, serverKey{o.Namespace, o.Name}})
		})
}

// registryQuery is a parsed GET /v0.1/servers.
type registryQuery struct {
	cursor       string
	limit        int
	search       string // lower case
	updatedSince time.Time
	version      string
}

// registryCursor is the decoded cursor: the name of the last entry of the previous
// page, and the fingerprint of the filters it belongs to.
type registryCursor struct {
	Version     int    `json:"v"`
	Fingerprint string `json:"f"`
	Name        string `json:"n"`
}

func (q *registryQuery) fingerprint() string {
	since := ""
	if !q.updatedSince.IsZero() {
		since = q.updatedSince.UTC().Format(time.RFC3339Nano)
	}
	return fingerprint("registry", q.search, since, q.version)
}

// registryParams are the query parameters of GET /v0.1/servers; include_deleted is
// accepted, and changes nothing: the catalogue keeps no deleted entries.
var registryParams = []string{"cursor", "limit", "search", "updated_since", "version", "include_deleted"}

func parseRegistryQuery(p url.Values) (registryQuery, *apiError) {
	var q registryQuery
	for _, name := range registryParams {
		if len(p[name]) > 1 {
			return q, errorf(http.StatusBadRequest, "query parameter %q is given more than once", name)
		}
	}
	q.limit = DefaultRegistryLimit
	if v := p.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxRegistryLimit {
			return q, errorf(http.StatusBadRequest, "limit must be an integer from 1 to %d", MaxRegistryLimit)
		}
		q.limit = n
	}
	if q.search = p.Get("search"); len(q.search) > MaxQueryLength {
		return q, errorf(http.StatusBadRequest, "search must be at most %d bytes", MaxQueryLength)
	}
	q.search = strings.ToLower(q.search)
	if v := p.Get("updated_since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return q, errorf(http.StatusBadRequest, "updated_since must be an RFC 3339 date and time, such as 2025-08-07T13:15:04Z")
		}
		q.updatedSince = t
	}
	if q.version = p.Get("version"); len(q.version) > 255 {
		return q, errorf(http.StatusBadRequest, "version must be at most 255 bytes")
	}
	if v := p.Get("include_deleted"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return q, errorf(http.StatusBadRequest, "include_deleted must be true or false")
		}
	}
	q.cursor = p.Get("cursor")
	return q, nil
}

// registryList is the answer of GET /v0.1/servers: apiv0.ServerListResponse with
// Switchboard's _meta in each item, encoded from each entry's stored bytes.
func registryList(records []*registryRecord, next string) []byte {
	size := 64
	for _, r := range records {
		size += len(r.body) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, `{"servers":[`...)
	for i, r := range records {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, r.body...)
	}
	md, err := json.Marshal(apiv0.Metadata{NextCursor: next, Count: len(records)})
	if err != nil {
		panic(fmt.Sprintf("catalog: encoding registry metadata: %v", err))
	}
	out = append(out, `],"metadata":`...)
	out = append(out, md...)
	return append(out, '}', '\n')
}

// maxRegistryReviews bounds the entries one registry request reviews the caller's use
// of: a caller who may use few of many entries gets short pages with a cursor rather than
// one request that asks the API server thousands of questions.
const maxRegistryReviews = 1024

// registryAccess decides, for one request, which entries its caller may see: those it may
// use (the gateway's rule). Answers are cached by the gatekeeper; within the request, the
// namespace-wide ones are remembered too.
type registryAccess struct {
	s      *Server
	c      *caller
	mu     sync.Mutex
	nsWide map[string]bool // kind + "/" + namespace ("" for cluster-wide) -> may use every object
}

func (s *Server) registryAccess(c *caller) *registryAccess {
	return &registryAccess{s: s, c: c, nsWide: map[string]bool{}}
}

// mayUse reports whether the caller may use every object of kind in namespace ("" for
// every namespace), or, when name is set, that one object.
func (g *gatekeeper) mayUse(ctx context.Context, c *caller, kind registryKind, namespace, name string) (bool, error) {
	key := c.AccessKey() + "/use/" + string(kind) + "/" + namespace + "/" + name
	if v, ok := g.accessCache.Get(key); ok {
		g.metrics.authCache("access", true)
		allowed, _ := v.(bool)
		return allowed, nil
	}
	g.metrics.authCache("access", false)
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	review, err := g.access.Create(ctx, c.AccessReview(authorizationv1.ResourceAttributes{
		Namespace: namespace,
		Verb:      "use",
		Group:     mcpv1alpha1.GroupVersion.Group,
		Resource:  string(kind),
		Name:      name,
	}), metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("reviewing use of %s in namespace %q: %w", kind, namespace, err)
	}
	ok := review.Status.Allowed && !review.Status.Denied
	g.accessCache.Add(key, ok, g.ttl)
	return ok, nil
}

// wide reports whether the caller may use every object of kind in namespace, cluster-
// wide grants included.
func (a *registryAccess) wide(ctx context.Context, kind registryKind, namespace string) (bool, error) {
	for _, ns := range []string{"", namespace} {
		k := string(kind) + "/" + ns
		a.mu.Lock()
		v, ok := a.nsWide[k]
		a.mu.Unlock()
		if !ok {
			var err error
			if v, err = a.s.gate.mayUse(ctx, a.c, kind, ns, ""); err != nil {
				return false, err
			}
			a.mu.Lock()
			a.nsWide[k] = v
			a.mu.Unlock()
		}
		if v {
			return true, nil
		}
	}
	return false, nil
}

// filter returns those of records the caller may see, in order, reviewing at most
// maxParallelReviews objects at a time.
func (a *registryAccess) filter(ctx context.Context, records []*registryRecord) ([]*registryRecord, error) {
	if a.c.all {
		return records, nil
	}
	keep := make([]bool, len(records))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		slots    = make(chan struct{}, maxParallelReviews)
	)
	for i, r := range records {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			ok, err := a.wide(ctx, r.key.kind, r.key.namespace)
			if err == nil && !ok {
				ok, err = a.s.gate.mayUse(ctx, a.c, r.key.kind, r.key.namespace, r.key.name)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			keep[i] = ok
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	out := records[:0:0]
	for i, r := range records {
		if keep[i] {
			out = append(out, r)
		}
	}
	return out, nil
}

// maxRegistryCursor bounds a cursor a caller sends back: ours are a name of at most
// maxRegistryName bytes and a fingerprint, base64 encoded, well within it. A longer one
// is refused before it is decoded.
const maxRegistryCursor = 1024

// listRegistry answers GET /v0.1/servers: entries in name order after the cursor that
// match the filters and that the caller may see.
func (s *Server) listRegistry(ctx context.Context, c *caller, q registryQuery) ([]byte, *apiError) {
	fp := q.fingerprint()
	after := ""
	if q.cursor != "" {
		var cur registryCursor
		invalid := errorf(http.StatusBadRequest, "cursor is invalid or belongs to other filters; start again without it")
		if len(q.cursor) > maxRegistryCursor {
			return nil, invalid
		}
		b, err := base64.RawURLEncoding.DecodeString(q.cursor)
		if err != nil || json.Unmarshal(b, &cur) != nil ||
			cur.Version != cursorVersion || cur.Fingerprint != fp || cur.Name == "" {
			return nil, invalid
		}
		after = cur.Name
	}
	access := s.registryAccess(c)
	matches := func(r *registryRecord) bool {
		return (q.search == "" || strings.Contains(r.lname, q.search)) &&
			(q.updatedSince.IsZero() || r.updated.After(q.updatedSince)) &&
			(q.version == "" || q.version == "latest" || q.version == r.version)
	}
	// Walk the entries in batches, reviewing each batch's objects in parallel, until a
	// page and one more are found, the entries end, or maxRegistryReviews were reviewed
	// (the page then ends at the last entry reviewed, with a cursor).
	var page []*registryRecord
	batch := min(max(2*q.limit, 16), 256)
	reviewed, cut := 0, ""
	for {
		candidates, last := s.registry.after(after, min(batch, s.opts.registryReviews-reviewed), matches)
		visible, err := access.filter(ctx, candidates)
		if err != nil {
			s.log.Error(err, "Authorization check failed")
			return nil, errorf(http.StatusInternalServerError, "authorization check failed")
		}
		page = append(page, visible...)
		reviewed += len(candidates)
		if len(page) > q.limit || last == "" {
			break
		}
		after = last
		if reviewed >= s.opts.registryReviews {
			cut = last
			break
		}
	}
	switch {
	case len(page) > q.limit:
		page = page[:q.limit]
		cut = page[len(page)-1].name
	case len(page) == q.limit && cut != "":
		cut = page[len(page)-1].name
	}
	next := ""
	if cut != "" {
		b, err := json.Marshal(registryCursor{Version: cursorVersion, Fingerprint: fp, Name: cut})
		if err != nil {
			panic(fmt.Sprintf("catalog: encoding a registry cursor: %v", err))
		}
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	return registryList(page, next), nil
}

// lookupRegistry returns the entry named name if the caller may see it; 404 otherwise,
// so that a caller learns nothing of entries it may not see.
func (s *Server) lookupRegistry(ctx context.Context, c *caller, name string) (*registryRecord, *apiError) {
	notFound := errorf(http.StatusNotFound, "Server not found")
	rec := s.registry.get(name)
	if rec == nil {
		return nil, notFound
	}
	visible, err := s.registryAccess(c).filter(ctx, []*registryRecord{rec})
	if err != nil {
		s.log.Error(err, "Authorization check failed")
		return nil, errorf(http.StatusInternalServerError, "authorization check failed")
	}
	if len(visible) == 0 {
		return nil, notFound
	}
	return rec, nil
}

// serveRegistry answers every request under /v0.1/servers.
func (s *Server) serveRegistry(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeRegistryError(w, errorf(http.StatusMethodNotAllowed, "method %s is not allowed; this registry is read-only", r.Method))
		return
	}
	params, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeRegistryError(w, errorf(http.StatusBadRequest, "query string is malformed"))
		return
	}
	name, version, list, ok := registryPath(r.URL.EscapedPath())
	if !ok {
		writeRegistryError(w, errorf(http.StatusNotFound, "no such path; the registry serves /v0.1/servers and /v0.1/servers/{serverName}/versions[/{version}]"))
		return
	}
	var q registryQuery
	if list {
		var aerr *apiError
		if q, aerr = parseRegistryQuery(params); aerr != nil {
			writeRegistryError(w, aerr)
			return
		}
	}
	c, aerr := s.admit(r)
	if aerr != nil {
		writeRegistryError(w, aerr)
		return
	}
	switch {
	case list:
		body, aerr := s.listRegistry(r.Context(), c, q)
		if aerr != nil {
			writeRegistryError(w, aerr)
			return
		}
		writeBody(w, r, body)
	case version == "":
		rec, aerr := s.lookupRegistry(r.Context(), c, name)
		if aerr != nil {
			writeRegistryError(w, aerr)
			return
		}
		writeBody(w, r, registryList([]*registryRecord{rec}, ""))
	default:
		rec, aerr := s.lookupRegistry(r.Context(), c, name)
		if aerr != nil {
			writeRegistryError(w, aerr)
			return
		}
		if version != "latest" && version != rec.version {
			writeRegistryError(w, errorf(http.StatusNotFound, "Server version not found"))
			return
		}
		writeBody(w, r, append(slices.Clip(rec.body), '\n'))
	}
}

// registryPath parses the escaped path of a registry request: /v0.1/servers (list),
// /v0.1/servers/{serverName}/versions or /v0.1/servers/{serverName}/versions/{version}.
// The name may come escaped (com.example%2Fserver, as the API asks) or not.
func registryPath(escaped string) (name, version string, list, ok bool) {
	rest, found := strings.CutPrefix(escaped, RegistryPathPrefix+"/servers")
	if !found {
		return "", "", false, false
	}
	if rest == "" || rest == "/" {
		return "", "", true, true
	}
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	n := len(segs)
	var nameSegs []string
	switch {
	case n >= 2 && segs[n-1] == "versions":
		nameSegs = segs[:n-1]
	case n >= 3 && segs[n-2] == "versions":
		v, err := url.PathUnescape(segs[n-1])
		if err != nil || v == "" {
			return "", "", false, false
		}
		version, nameSegs = v, segs[:n-2]
	default:
		return "", "", false, false
	}
	name, err := url.PathUnescape(strings.Join(nameSegs, "/"))
	if err != nil || name == "" || len(name) > maxRegistryName {
		return "", "", false, false
	}
	return name, version, false, true
}

// registryError is the body of the registry API's errors, as its OpenAPI document has
// them.
type registryError struct {
	Error string `json:"error"`
}

// writeRegistryError writes e with the headers of writeError (the 401 challenge, 429's
// Retry-After) and the registry's error body.
func writeRegistryError(w http.ResponseWriter, e *apiError) {
	if e.code == http.StatusUnauthorized && e.challenge == "" {
		e.challenge = plainChallenge
	}
	errorHeaders(w, e)
	w.WriteHeader(e.code)
	_ = json.NewEncoder(w).Encode(registryError{Error: e.msg})
}
