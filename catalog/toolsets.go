package catalog

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
)

// ToolsetSummary is one MCPToolset as the catalogue lists it.
type ToolsetSummary struct {
	// Namespace is the MCPToolset's namespace.
	Namespace string `json:"namespace" jsonschema:"namespace of the MCPToolset"`
	// Name is the MCPToolset's name.
	Name string `json:"name" jsonschema:"name of the MCPToolset"`
	// Description is spec.description.
	Description string `json:"description,omitempty" jsonschema:"what the toolset is for"`
	// Discovery is spec.discovery: Direct or Search.
	Discovery string `json:"discovery,omitempty" jsonschema:"Direct: tools/list answers every tool; Search: find_tools and call_tool"`
	// Ready is the Ready condition's status.
	Ready bool `json:"ready" jsonschema:"whether at least one of the toolset's servers is ready"`
	// Servers are the names of the selected MCPServers.
	Servers []string `json:"servers,omitempty" jsonschema:"the MCPServers whose tools the toolset exposes"`
	// ToolCount is status.toolCount.
	ToolCount int32 `json:"toolCount" jsonschema:"number of tools the toolset exposes (before the caller's RBAC)"`
	// GatewayPath is the toolset's MCP endpoint on the gateway.
	GatewayPath string `json:"gatewayPath" jsonschema:"path of the toolset's MCP endpoint on this address"`
	// ResourceCount is the number of exposed resources and resource templates.
	ResourceCount int32 `json:"resourceCount" jsonschema:"number of resources and resource templates the toolset exposes (before the caller's RBAC)"`
	// Resources are the exposed resources, sorted by exposed URI, at most 256.
	Resources []ToolsetResource `json:"resources,omitempty" jsonschema:"the resources the toolset exposes, under the URIs to read them by through the toolset"`
	// ResourceTemplates are the exposed resource templates, sorted by exposed URI
	// template, at most 256.
	ResourceTemplates []ToolsetResourceTemplate `json:"resourceTemplates,omitempty" jsonschema:"the resource templates the toolset exposes"`
	// ResourcesTruncated is true when the toolset exposes more resources or templates
	// than are listed.
	ResourcesTruncated bool `json:"resourcesTruncated,omitempty" jsonschema:"true when more resources or resource templates exist than are listed"`
	// PromptCount is the number of exposed prompts.
	PromptCount int32 `json:"promptCount" jsonschema:"number of prompts the toolset exposes (before the caller's RBAC)"`
	// Prompts are the exposed prompts, sorted by exposed name, at most 256.
	Prompts []ToolsetPrompt `json:"prompts,omitempty" jsonschema:"the prompts the toolset exposes, under the names to get them by through the toolset"`
	// PromptsTruncated is true when the toolset exposes more prompts than are listed.
	PromptsTruncated bool `json:"promptsTruncated,omitempty" jsonschema:"true when more prompts exist than are listed"`
}

// ToolsetResource is one resource a toolset exposes.
type ToolsetResource struct {
	// URI is the exposed URI: the origin's own when its prefix is "", else wrapped as
	// switchboard+<server>:<uri> (ui://switchboard+<server>/<rest> for a ui:// URI).
	URI string `json:"uri" jsonschema:"URI of the resource through the toolset"`
	// Name is the resource's name on its server.
	Name string `json:"name,omitempty" jsonschema:"name of the resource"`
	// Server is the MCPServer the resource comes from.
	Server string `json:"server" jsonschema:"the MCPServer the resource comes from"`
}

// ToolsetResourceTemplate is one resource template a toolset exposes.
type ToolsetResourceTemplate struct {
	// URITemplate is the exposed URI template, wrapped as a resource's URI is.
	URITemplate string `json:"uriTemplate" jsonschema:"URI template (RFC 6570) of the resources through the toolset"`
	// Name is the template's name on its server.
	Name string `json:"name,omitempty" jsonschema:"name of the resource template"`
	// Server is the MCPServer the template comes from.
	Server string `json:"server" jsonschema:"the MCPServer the resource template comes from"`
}

// ToolsetPrompt is one prompt a toolset exposes.
type ToolsetPrompt struct {
	// Name is the exposed (prefixed) name.
	Name string `json:"name" jsonschema:"name of the prompt through the toolset"`
	// Description says what the prompt is for.
	Description string `json:"description,omitempty" jsonschema:"what the prompt is for"`
	// Server is the MCPServer the prompt comes from.
	Server string `json:"server" jsonschema:"the MCPServer the prompt comes from"`
}

// ToolsetList is the catalogue's list of toolsets.
type ToolsetList struct {
	// Items are the toolsets, in namespace and name order.
	Items []ToolsetSummary `json:"items"`
}

// ListToolsetsInput is the input of the list_toolsets MCP tool.
type ListToolsetsInput struct {
	// Namespace restricts the list to one namespace.
	Namespace string `json:"namespace,omitempty" jsonschema:"only list this Kubernetes namespace"`
}

// Bounds of the toolsets list: toolsets in one answer, resources, resource templates
// and prompts listed per toolset, and all of those in one answer (a toolset past that
// budget lists fewer, and says so, with its counts still whole).
const (
	maxListedToolsets       = 1000
	maxListedToolsetFeature = 256
	maxListedFeatures       = 4096
)

// toolsetStore holds the catalogue's copies of MCPToolsets, and of what their exposure
// reads of the MCPServers of their namespaces: a toolset's resources and prompts are
// computed, as its status' counts are, from the servers' status (internal/toolsets),
// again whenever the toolset or a server it selects (or selected) changes.
type toolsetStore struct {
	mu    sync.RWMutex
	items map[serverKey]*toolsetItem
	// servers are the MCPServers by namespace and name, trimmed to what a toolset's
	// exposure reads (featureSource).
	servers map[string]map[string]*mcpv1alpha1.MCPServer
}

// toolsetItem is one MCPToolset in the store.
type toolsetItem struct {
	// toolset is the MCPToolset's name, namespace and spec.
	toolset *mcpv1alpha1.MCPToolset
	// selected names the servers the summary's resources and prompts were computed
	// from, Ready or not, existing or not.
	selected []string
	summary  ToolsetSummary
}

func newToolsetStore() toolsetStore {
	return toolsetStore{items: map[serverKey]*toolsetItem{}, servers: map[string]map[string]*mcpv1alpha1.MCPServer{}}
}

func toolsetSummaryOf(o *mcpv1alpha1.MCPToolset) ToolsetSummary {
	s := ToolsetSummary{
		Namespace: o.Namespace, Name: o.Name, Description: o.Spec.Description,
		Discovery: string(o.Spec.Discovery), ToolCount: o.Status.ToolCount,
		GatewayPath: gatewaypath.Toolset(o.Namespace, o.Name),
		Ready:       meta.IsStatusConditionPresentAndEqual(o.Status.Conditions, mcpv1alpha1.ConditionReady, metav1.ConditionTrue),
	}
	if s.Discovery == "" {
		s.Discovery = string(mcpv1alpha1.ToolsetDiscoveryDirect)
	}
	for _, srv := range o.Status.Servers {
		s.Servers = append(s.Servers, srv.Name)
	}
	return s
}

// featureSource is what a toolset's exposure reads of an MCPServer: its name, labels
// and generation (to select it), suspension and Ready condition (to know whether it
// serves), and the resources and prompts its status lists, which it shares with o and
// never changes.
func featureSource(o *mcpv1alpha1.MCPServer) *mcpv1alpha1.MCPServer {
	src := &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{
		Namespace: o.Namespace, Name: o.Name, Labels: o.Labels, Generation: o.Generation}}
	src.Spec.Suspend = o.Spec.Suspend
	if c := meta.FindStatusCondition(o.Status.Conditions, mcpv1alpha1.ConditionReady); c != nil {
		src.Status.Conditions = []metav1.Condition{{Type: c.Type, Status: c.Status, ObservedGeneration: c.ObservedGeneration}}
	}
	src.Status.Resources, src.Status.Prompts = o.Status.Resources, o.Status.Prompts
	return src
}

// putToolset records a toolset and computes its summary.
func (st *toolsetStore) putToolset(o *mcpv1alpha1.MCPToolset) {
	item := &toolsetItem{
		toolset: &mcpv1alpha1.MCPToolset{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}, Spec: *o.Spec.DeepCopy()},
		summary: toolsetSummaryOf(o),
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.compute(item)
	st.items[serverKey{namespace: o.Namespace, name: o.Name}] = item
}

func (st *toolsetStore) deleteToolset(o *mcpv1alpha1.MCPToolset) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.items, serverKey{namespace: o.Namespace, name: o.Name})
}

// putServer records what toolsets read of a server and recomputes the toolsets it
// matters to, unless none of that changed (a server's status changes often in ways no
// toolset reads).
func (st *toolsetStore) putServer(o *mcpv1alpha1.MCPServer) {
	src := featureSource(o)
	st.mu.Lock()
	defer st.mu.Unlock()
	byName := st.servers[o.Namespace]
	if byName == nil {
		byName = map[string]*mcpv1alpha1.MCPServer{}
		st.servers[o.Namespace] = byName
	}
	if old := byName[o.Name]; old != nil && equality.Semantic.DeepEqual(old, src) {
		return
	}
	byName[o.Name] = src
	st.refresh(src)
}

func (st *toolsetStore) deleteServer(o *mcpv1alpha1.MCPServer) {
	st.mu.Lock()
	defer st.mu.Unlock()
	byName := st.servers[o.Namespace]
	if _, ok := byName[o.Name]; !ok {
		return
	}
	delete(byName, o.Name)
	if len(byName) == 0 {
		delete(st.servers, o.Namespace)
	}
	st.refresh(&mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name}})
}

// refresh recomputes the toolsets of server's namespace that selected it or select it
// now. Callers hold the write lock.
func (st *toolsetStore) refresh(server *mcpv1alpha1.MCPServer) {
	for key, item := range st.items {
		if key.namespace == server.Namespace &&
			(slices.Contains(item.selected, server.Name) || toolsets.Selects(item.toolset, server)) {
			st.compute(item)
		}
	}
}

// compute sets item's resources and prompts from the servers it selects, as the
// toolset's status counts them. Callers hold the write lock.
func (st *toolsetStore) compute(item *toolsetItem) {
	ts := item.toolset
	var candidates []mcpv1alpha1.MCPServer
	for _, srv := range st.servers[ts.Namespace] {
		if toolsets.Selects(ts, srv) {
			candidates = append(candidates, *srv)
		}
	}
	// An invalid selector selects nothing; the toolset's own status says so.
	selected, _ := toolsets.Select(ts, candidates)
	item.selected = item.selected[:0]
	origins := make([]toolsets.FeatureOrigin, 0, len(selected))
	servers := make(map[string]*mcpv1alpha1.MCPServer, len(selected))
	for _, s := range selected {
		item.selected = append(item.selected, s.Name)
		if s.Ready() {
			origins = append(origins, toolsets.StatusFeatures(s))
			servers[s.Name] = s.Server
		}
	}
	f := toolsets.ExposeFeatures(&ts.Spec, origins)
	listToolsetFeatures(&item.summary, f, servers)
}

// originKey names one resource, template or prompt of one server: its URI, template
// or name on the server.
type originKey struct {
	server, name string
	template     bool
}

// listToolsetFeatures sets sum's resources, templates and prompts from what the toolset
// exposes, with the names and descriptions the origins' status gives them.
func listToolsetFeatures(sum *ToolsetSummary, f toolsets.Features, servers map[string]*mcpv1alpha1.MCPServer) {
	resources := map[originKey]mcpv1alpha1.ResourceInfo{}
	prompts := map[originKey]mcpv1alpha1.PromptInfo{}
	for name, srv := range servers {
		for _, r := range srv.Status.Resources {
			if r.URITemplate != "" {
				resources[originKey{name, r.URITemplate, true}] = r
			} else {
				resources[originKey{name, r.URI, false}] = r
			}
		}
		for _, p := range srv.Status.Prompts {
			prompts[originKey{server: name, name: p.Name}] = p
		}
	}
	sum.ResourceCount = int32(len(f.Resources) + len(f.Templates)) //nolint:gosec // at most 32 servers' status lists of 256
	sum.PromptCount = int32(len(f.Prompts))                        //nolint:gosec // at most 32 servers' status lists of 256
	sum.Resources, sum.ResourceTemplates, sum.Prompts = nil, nil, nil
	for _, r := range f.Resources[:min(len(f.Resources), maxListedToolsetFeature)] {
		info := resources[originKey{r.Server, r.Original, false}]
		sum.Resources = append(sum.Resources, ToolsetResource{URI: r.Name, Name: info.Name, Server: r.Server})
	}
	for _, r := range f.Templates[:min(len(f.Templates), maxListedToolsetFeature)] {
		info := resources[originKey{r.Server, r.Original, true}]
		sum.ResourceTemplates = append(sum.ResourceTemplates, ToolsetResourceTemplate{URITemplate: r.Name, Name: info.Name, Server: r.Server})
	}
	for _, p := range f.Prompts[:min(len(f.Prompts), maxListedToolsetFeature)] {
		info := prompts[originKey{server: p.Server, name: p.Original}]
		sum.Prompts = append(sum.Prompts, ToolsetPrompt{Name: p.Name, Description: info.Description, Server: p.Server})
	}
	sum.ResourcesTruncated = len(sum.Resources)+len(sum.ResourceTemplates) < int(sum.ResourceCount)
	sum.PromptsTruncated = len(sum.Prompts) < int(sum.PromptCount)
}

// withinBudget returns s listing no more resources, templates and prompts than budget
// allows, and takes what it lists from budget.
func (s ToolsetSummary) withinBudget(budget *int) ToolsetSummary {
	take := func(n int) int {
		n = min(n, *budget)
		*budget -= n
		return n
	}
	s.Resources = s.Resources[:take(len(s.Resources))]
	s.ResourceTemplates = s.ResourceTemplates[:take(len(s.ResourceTemplates))]
	s.Prompts = s.Prompts[:take(len(s.Prompts))]
	s.ResourcesTruncated = len(s.Resources)+len(s.ResourceTemplates) < int(s.ResourceCount)
	s.PromptsTruncated = len(s.Prompts) < int(s.PromptCount)
	return s
}

// toolsetEventHandler keeps the store in step with an MCPToolset informer.
func (s *Server) toolsetEventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(s.toolsets.putToolset, s.toolsets.deleteToolset)
}

// toolsetServerHandler keeps the store's copies of MCPServers in step with an MCPServer
// informer.
func (s *Server) toolsetServerHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(s.toolsets.putServer, s.toolsets.deleteServer)
}

// listToolsets answers GET /api/v1/toolsets and the list_toolsets tool: the toolsets of
// the namespaces the caller may see, as for servers.
func (s *Server) listToolsets(ctx context.Context, c *caller, namespace string) (*ToolsetList, *apiError) {
	if err := checkNamespace(namespace); err != nil {
		return nil, err
	}
	s.toolsets.mu.RLock()
	var candidates []string
	for key := range s.toolsets.items {
		if !slices.Contains(candidates, key.namespace) {
			candidates = append(candidates, key.namespace)
		}
	}
	s.toolsets.mu.RUnlock()
	var sc scope
	if namespace != "" {
		var aerr *apiError
		if sc, aerr = s.visible(ctx, c, namespace); aerr != nil {
			return nil, aerr
		}
	} else {
		slices.Sort(candidates)
		var err error
		if sc, err = s.gate.scope(ctx, c, candidates); err != nil {
			s.log.Error(err, "Authorization check failed")
			return nil, errorf(http.StatusInternalServerError, "authorization check failed")
		}
	}
	s.toolsets.mu.RLock()
	out := &ToolsetList{Items: []ToolsetSummary{}}
	for key, t := range s.toolsets.items {
		if sc.allows(key.namespace) && (namespace == "" || key.namespace == namespace) {
			out.Items = append(out.Items, t.summary)
		}
	}
	s.toolsets.mu.RUnlock()
	slices.SortFunc(out.Items, func(a, b ToolsetSummary) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out.Items) > maxListedToolsets {
		out.Items = out.Items[:maxListedToolsets]
	}
	budget := maxListedFeatures
	for i := range out.Items {
		out.Items[i] = out.Items[i].withinBudget(&budget)
	}
	return out, nil
}

func (s *Server) serveToolsets(ctx context.Context, c *caller, _ *http.Request, p url.Values) (any, *apiError) {
	return s.listToolsets(ctx, c, p.Get("namespace"))
}
