// Package toolsets decides, as pure functions of API objects, which MCPServers an
// MCPToolset selects and under which names it exposes their tools. The MCPToolset
// reconciler publishes the outcome in status; the gateway applies the same decision to
// the tools it lists from the origin servers, so the two never disagree.
//
// It must not do I/O, talk MCP or read from the API server: callers hand it the objects
// and tool names they observed.
package toolsets

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolglob"
)

var validName = regexp.MustCompile(mcpv1alpha1.ExposedToolNamePattern)

// ValidName reports whether name may be exposed: it matches
// mcpv1alpha1.ExposedToolNamePattern.
func ValidName(name string) bool { return validName.MatchString(name) }

// Selected is one server a toolset selects: by name (Server nil when no such server
// exists) or by a selector.
type Selected struct {
	// Name is the server's name.
	Name string
	// Server is the MCPServer; nil when an entry names a server that does not exist.
	Server *mcpv1alpha1.MCPServer
	// Prefix is what the server's tool names get in front of them.
	Prefix string
}

// Ready reports whether the selected server exists and is Ready for its latest spec.
func (s Selected) Ready() bool { return ServerReady(s.Server) }

// ServerReady reports whether an MCPServer is Ready for its current generation and not
// suspended.
func ServerReady(obj *mcpv1alpha1.MCPServer) bool {
	if obj == nil || obj.Spec.Suspend {
		return false
	}
	c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == obj.Generation
}

// Select returns the servers ts selects among candidates (the MCPServers of its
// namespace; those of other namespaces are ignored), sorted by name. A server several
// entries select gets the first entry's prefix. The error names an entry whose selector
// is invalid; the other entries are still selected.
func Select(ts *mcpv1alpha1.MCPToolset, candidates []mcpv1alpha1.MCPServer) ([]Selected, error) {
	byName := make(map[string]*mcpv1alpha1.MCPServer, len(candidates))
	for i := range candidates {
		if candidates[i].Namespace == ts.Namespace {
			byName[candidates[i].Name] = &candidates[i]
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)

	var errs []string
	chosen := map[string]Selected{}
	for i, entry := range ts.Spec.Servers {
		if entry.Name != "" {
			if _, ok := chosen[entry.Name]; !ok {
				chosen[entry.Name] = Selected{Name: entry.Name, Server: byName[entry.Name], Prefix: prefix(entry, entry.Name)}
			}
			continue
		}
		if entry.Selector == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(entry.Selector)
		if err != nil {
			errs = append(errs, fmt.Sprintf("spec.servers[%d].selector: %v", i, err))
			continue
		}
		for _, name := range names {
			if _, ok := chosen[name]; ok {
				continue
			}
			if sel.Matches(labels.Set(byName[name].Labels)) {
				chosen[name] = Selected{Name: name, Server: byName[name], Prefix: prefix(entry, name)}
			}
		}
	}
	out := make([]Selected, 0, len(chosen))
	for _, s := range chosen {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// Selects reports whether ts could select the server: it names it, or one of its
// selectors matches the server's labels. An invalid selector selects nothing.
func Selects(ts *mcpv1alpha1.MCPToolset, server *mcpv1alpha1.MCPServer) bool {
	if ts.Namespace != server.Namespace {
		return false
	}
	for _, entry := range ts.Spec.Servers {
		if entry.Name == server.Name {
			return true
		}
		if entry.Selector == nil {
			continue
		}
		if sel, err := metav1.LabelSelectorAsSelector(entry.Selector); err == nil && sel.Matches(labels.Set(server.Labels)) {
			return true
		}
	}
	return false
}

func prefix(entry mcpv1alpha1.ToolsetServer, server string) string {
	if entry.Prefix != nil {
		return *entry.Prefix
	}
	return server + "_"
}

// Origin is one selected server and the names of the tools it offers.
type Origin struct {
	Server string
	Prefix string
	Tools  []string
}

// Tool is one exposed tool.
type Tool struct {
	// Name is the exposed name.
	Name string
	// Server and Tool name the origin.
	Server, Tool string
	// Description replaces the origin's description when HasDescription is set.
	Description    string
	HasDescription bool
}

// Ref names one origin tool and the name it would be exposed under.
type Ref struct {
	Name, Server, Tool string
}

// Exposure is what a toolset serves, given what its origins offer.
type Exposure struct {
	// Tools are the exposed tools, sorted by exposed name; names are unique and valid.
	Tools []Tool
	// Collisions lists, per exposed name two or more origin tools would share, every
	// such origin; none of them is exposed. Sorted by name.
	Collisions [][]Ref
	// Invalid lists the origin tools whose exposed name does not match
	// mcpv1alpha1.ExposedToolNamePattern; they are not exposed. Sorted by name.
	Invalid []Ref
	// PerServer counts the exposed tools of each server.
	PerServer map[string]int
}

// Expose applies the toolset's prefixes, allow and deny globs and overrides to the
// origins' tools. Filters see the prefixed names; overrides are keyed by them too and
// rename after filtering. Two tools under one exposed name are a collision: neither is
// exposed.
func Expose(spec *mcpv1alpha1.MCPToolsetSpec, origins []Origin) Exposure {
	var allow, deny []string
	overrides := map[string]mcpv1alpha1.ToolOverride{}
	if spec.Tools != nil {
		allow, deny = spec.Tools.Allow, spec.Tools.Deny
		for _, o := range spec.Tools.Overrides {
			overrides[o.Name] = o
		}
	}
	byName := map[string][]Tool{}
	for _, o := range origins {
		for _, tool := range o.Tools {
			prefixed := o.Prefix + tool
			if !Allowed(allow, deny, prefixed) {
				continue
			}
			t := Tool{Name: prefixed, Server: o.Server, Tool: tool}
			if ov, ok := overrides[prefixed]; ok {
				if ov.Rename != "" {
					t.Name = ov.Rename
				}
				if ov.Description != "" {
					t.Description, t.HasDescription = ov.Description, true
				}
			}
			byName[t.Name] = append(byName[t.Name], t)
		}
	}
	exp := Exposure{PerServer: map[string]int{}}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		tools := byName[name]
		switch {
		case len(tools) > 1:
			refs := make([]Ref, len(tools))
			for i, t := range tools {
				refs[i] = Ref{Name: name, Server: t.Server, Tool: t.Tool}
			}
			slices.SortFunc(refs, func(a, b Ref) int { return strings.Compare(a.Server+"/"+a.Tool, b.Server+"/"+b.Tool) })
			exp.Collisions = append(exp.Collisions, refs)
		case !ValidName(name):
			exp.Invalid = append(exp.Invalid, Ref{Name: name, Server: tools[0].Server, Tool: tools[0].Tool})
		default:
			exp.Tools = append(exp.Tools, tools[0])
			exp.PerServer[tools[0].Server]++
		}
	}
	return exp
}

// Allowed reports whether an exposed name passes the allow and deny globs: it matches an
// allow glob (or allow is empty) and no deny glob (see toolglob.Check).
func Allowed(allow, deny []string, name string) bool {
	return toolglob.Allowed(allow, deny, name)
}
