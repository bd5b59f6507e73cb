package catalog

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/objectevents"
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

// maxListedToolsets bounds one answer of the toolsets list.
const maxListedToolsets = 1000

// toolsetStore holds the catalogue's copies of MCPToolsets.
type toolsetStore struct {
	mu    sync.RWMutex
	items map[serverKey]ToolsetSummary
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

// toolsetEventHandler keeps the store in step with an MCPToolset informer.
func (s *Server) toolsetEventHandler() toolscache.ResourceEventHandler {
	return objectevents.Handler(
		func(o *mcpv1alpha1.MCPToolset) {
			s.toolsets.mu.Lock()
			defer s.toolsets.mu.Unlock()
			s.toolsets.items[serverKey{namespace: o.Namespace, name: o.Name}] = toolsetSummaryOf(o)
		},
		func(o *mcpv1alpha1.MCPToolset) {
			s.toolsets.mu.Lock()
			defer s.toolsets.mu.Unlock()
			delete(s.toolsets.items, serverKey{namespace: o.Namespace, name: o.Name})
		})
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
			out.Items = append(out.Items, t)
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
	return out, nil
}

func (s *Server) serveToolsets(ctx context.Context, c *caller, _ *http.Request, p url.Values) (any, *apiError) {
	return s.listToolsets(ctx, c, p.Get("namespace"))
}
