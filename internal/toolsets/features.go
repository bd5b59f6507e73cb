package toolsets

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolglob"
)

// How a toolset exposes its origins' resources. An origin whose prefix is "" keeps its
// URIs as they are; any other origin's URIs are wrapped with its server's name, keeping
// the original visible and the wrapping reversible:
//
//	file:///notes.txt    of server "docs"  ->  switchboard+docs:file:///notes.txt
//	ui://dashboard/app   of server "docs"  ->  ui://switchboard+docs/dashboard/app
//
// An MCP App's `ui://` resource keeps its scheme, so that a host that renders apps still
// recognises it. Resource templates are wrapped the same way. A URI of a "" origin that
// already looks wrapped is not exposed: it could be mistaken for another origin's.
const (
	uriWrapPrefix   = "switchboard+"
	uiScheme        = "ui://"
	uiWrappedPrefix = uiScheme + uriWrapPrefix
)

// ExposedURI returns the URI under which a toolset serves uri (or a URI template) of
// server, whose prefix in the toolset is prefix.
func ExposedURI(prefix, server, uri string) string {
	if prefix == "" {
		return uri
	}
	if rest, ok := strings.CutPrefix(uri, uiScheme); ok {
		return uiWrappedPrefix + server + "/" + rest
	}
	return uriWrapPrefix + server + ":" + uri
}

// SplitURI decodes an exposed URI: a wrapped one gives its origin server and the
// origin's own URI; any other gives server "" and the URI itself, which only an origin
// whose prefix is "" can own. An exposed URI that starts like a wrapped one but does not
// decode (no server name, or nothing after it) is an error.
func SplitURI(exposed string) (server, uri string, err error) {
	var rest string
	var ui bool
	switch {
	case strings.HasPrefix(exposed, uiWrappedPrefix):
		rest, ui = exposed[len(uiWrappedPrefix):], true
	case strings.HasPrefix(exposed, uriWrapPrefix):
		rest = exposed[len(uriWrapPrefix):]
	default:
		return "", exposed, nil
	}
	sep := ":"
	if ui {
		sep = "/"
	}
	server, uri, found := strings.Cut(rest, sep)
	if !found || !validServerName(server) || (!ui && uri == "") {
		return "", "", fmt.Errorf("resource URI %q starts with %q but names no server of the toolset", clipURI(exposed), uriWrapPrefix)
	}
	if ui {
		uri = uiScheme + uri
	}
	return server, uri, nil
}

// Wrapped reports whether uri looks like a wrapped URI, which no origin whose prefix is
// "" may expose as its own.
func Wrapped(uri string) bool {
	return strings.HasPrefix(uri, uriWrapPrefix) || strings.HasPrefix(uri, uiWrappedPrefix)
}

// validServerName reports whether name could be an MCPServer's name (a DNS subdomain):
// the one part of a wrapped URI the decoding must trust to pick an origin.
func validServerName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// clipURI is a URI as an error may show it: without its query string, which may carry a
// secret, and at most 256 bytes.
func clipURI(uri string) string {
	uri, _, _ = strings.Cut(uri, "?")
	if len(uri) > 256 {
		uri = uri[:256] + "..."
	}
	return uri
}

// ExposedPrompt returns the name under which a toolset serves prompt name of an origin
// whose prefix is prefix.
func ExposedPrompt(prefix, name string) string { return prefix + name }

// FeatureOrigin is one selected server and the resources, resource templates and
// prompts it offers.
type FeatureOrigin struct {
	Server, Prefix string
	// Resources are the origin's resource URIs, Templates its URI templates, Prompts its
	// prompt names.
	Resources, Templates, Prompts []string
}

// Feature is one exposed resource, resource template or prompt.
type Feature struct {
	// Name is the exposed URI, URI template or prompt name.
	Name string
	// Server and Original name the origin and its own URI, template or name.
	Server, Original string
}

// Features is what a toolset serves of its origins' resources and prompts.
type Features struct {
	// Resources, Templates and Prompts are the exposed ones, sorted by exposed name;
	// exposed names are unique within each.
	Resources, Templates, Prompts []Feature
	// Collisions lists, per exposed name two or more origins would share, every such
	// origin; none of them is exposed. Sorted by name.
	Collisions [][]Feature
	// Hidden lists what an origin whose prefix is "" offers under a URI that looks
	// wrapped (see Wrapped), or under a prompt name that is not a valid exposed name:
	// not exposed. Sorted by name.
	Hidden []Feature
}

// ExposeFeatures applies the toolset's prefixes and its resource and prompt filters to
// what the origins offer. Filters see the exposed URIs and names.
func ExposeFeatures(spec *mcpv1alpha1.MCPToolsetSpec, origins []FeatureOrigin) Features {
	var resAllow, resDeny, promptAllow, promptDeny []string
	if spec.Resources != nil {
		resAllow, resDeny = spec.Resources.Allow, spec.Resources.Deny
	}
	if spec.Prompts != nil {
		promptAllow, promptDeny = spec.Prompts.Allow, spec.Prompts.Deny
	}
	resources, templates, prompts := map[string][]Feature{}, map[string][]Feature{}, map[string][]Feature{}
	var hidden []Feature
	for _, o := range origins {
		for _, uri := range o.Resources {
			addURI(resources, &hidden, o, uri, resAllow, resDeny)
		}
		for _, tmpl := range o.Templates {
			addURI(templates, &hidden, o, tmpl, resAllow, resDeny)
		}
		for _, name := range o.Prompts {
			f := Feature{Name: ExposedPrompt(o.Prefix, name), Server: o.Server, Original: name}
			switch {
			case !ValidName(f.Name):
				hidden = append(hidden, f)
			case toolglob.Allowed(promptAllow, promptDeny, f.Name):
				prompts[f.Name] = append(prompts[f.Name], f)
			}
		}
	}
	var out Features
	out.Resources = unique(resources, &out.Collisions)
	out.Templates = unique(templates, &out.Collisions)
	out.Prompts = unique(prompts, &out.Collisions)
	sort.Slice(out.Collisions, func(i, j int) bool { return out.Collisions[i][0].Name < out.Collisions[j][0].Name })
	slices.SortFunc(hidden, func(a, b Feature) int { return strings.Compare(a.Name, b.Name) })
	out.Hidden = hidden
	return out
}

func addURI(into map[string][]Feature, hidden *[]Feature, o FeatureOrigin, uri string, allow, deny []string) {
	f := Feature{Name: ExposedURI(o.Prefix, o.Server, uri), Server: o.Server, Original: uri}
	if o.Prefix == "" && Wrapped(uri) {
		*hidden = append(*hidden, f)
		return
	}
	if uriAllowed(allow, deny, f.Name) {
		into[f.Name] = append(into[f.Name], f)
	}
}

// uriAllowed applies spec.resources' globs to an exposed URI: it matches an allow glob
// (or allow is empty) and no deny glob. '*' and '?' are the only wildcards.
func uriAllowed(allow, deny []string, uri string) bool {
	for _, g := range deny {
		if toolglob.MatchAny(g, uri) {
			return false
		}
	}
	if len(allow) == 0 {
		return true
	}
	for _, g := range allow {
		if toolglob.MatchAny(g, uri) {
			return true
		}
	}
	return false
}

// unique returns the features exposed under one name only, sorted by name, and appends
// the others to collisions.
func unique(byName map[string][]Feature, collisions *[][]Feature) []Feature {
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []Feature
	for _, name := range names {
		fs := byName[name]
		if len(fs) > 1 {
			slices.SortFunc(fs, func(a, b Feature) int { return strings.Compare(a.Server, b.Server) })
			*collisions = append(*collisions, fs)
			continue
		}
		out = append(out, fs[0])
	}
	return out
}

// ResourceAllowed reports whether the toolset's spec.resources lets exposed URI through.
func ResourceAllowed(spec *mcpv1alpha1.MCPToolsetSpec, exposed string) bool {
	if spec.Resources == nil {
		return true
	}
	return uriAllowed(spec.Resources.Allow, spec.Resources.Deny, exposed)
}
