package controllers

import (
	"cmp"
	"slices"
	"strings"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// Bounds of the resources and prompts an MCPServer's status lists. They match the CRD
// schema, so a hostile server can never make a status patch fail validation, and keep
// the whole status, with 256 tools, under about 850 KB (etcd's limit is 1.5 MiB): a
// prompt's description is cut shorter than a tool's.
const (
	maxStatusResources    = 256
	maxStatusPrompts      = 256
	maxResourceURILength  = 512
	maxResourceNameLength = 256
	maxMIMETypeLength     = 128
	maxPromptNameLength   = 256
	maxPromptTitleLength  = 256
	maxPromptDescLength   = 256
)

// statusResources returns the resources and resource templates to list in status,
// sorted by URI (a template by its template), bounded to maxStatusResources and to the
// schema's field lengths, and whether any were left out. URIs lose their user
// information and query string (statusURI); a resource whose URI is then empty, too
// long, or the same as an earlier one's is left out rather than listed mangled.
func statusResources(resources []connector.Resource, templates []connector.ResourceTemplate) ([]mcpv1alpha1.ResourceInfo, bool) {
	type item struct {
		key      string
		template bool
		info     mcpv1alpha1.ResourceInfo
	}
	items := make([]item, 0, len(resources)+len(templates))
	truncated := false
	add := func(raw string, template bool, name, mimeType string) {
		uri := statusURI(raw, template)
		if uri == "" || len(uri) > maxResourceURILength {
			truncated = true
			return
		}
		info := mcpv1alpha1.ResourceInfo{
			Name:     connector.TruncateUTF8(name, maxResourceNameLength),
			MIMEType: connector.TruncateUTF8(mimeType, maxMIMETypeLength),
		}
		if template {
			info.URITemplate = uri
		} else {
			info.URI = uri
		}
		items = append(items, item{key: uri, template: template, info: info})
	}
	for _, r := range resources {
		add(r.URI, false, r.Name, r.MIMEType)
	}
	for _, r := range templates {
		add(r.URITemplate, true, r.Name, r.MIMEType)
	}
	// Sorted by URI, a resource before a template of the same text; stable, so that of
	// two resources that differ only in what statusURI removed the server's first stays.
	slices.SortStableFunc(items, func(a, b item) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		switch {
		case a.template == b.template:
			return 0
		case a.template:
			return 1
		default:
			return -1
		}
	})
	before := len(items)
	items = slices.CompactFunc(items, func(a, b item) bool { return a.key == b.key && a.template == b.template })
	truncated = truncated || len(items) < before
	if len(items) > maxStatusResources {
		items, truncated = items[:maxStatusResources], true
	}
	if len(items) == 0 {
		return nil, truncated
	}
	out := make([]mcpv1alpha1.ResourceInfo, len(items))
	for i, it := range items {
		out[i] = it.info
	}
	return out, truncated
}

// statusPrompts returns the prompts to list in status, sorted by name, bounded to
// maxStatusPrompts and to the schema's field lengths, and whether any were left out. A
// prompt whose name does not fit the schema (or repeats an earlier name) is left out
// rather than listed under a mangled name.
func statusPrompts(prompts []connector.Prompt) ([]mcpv1alpha1.PromptInfo, bool) {
	sorted := slices.Clone(prompts)
	slices.SortStableFunc(sorted, func(a, b connector.Prompt) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]mcpv1alpha1.PromptInfo, 0, min(len(sorted), maxStatusPrompts))
	truncated := false
	for i, p := range sorted {
		if p.Name == "" || len(p.Name) > maxPromptNameLength || i > 0 && sorted[i-1].Name == p.Name {
			truncated = true
			continue
		}
		if len(out) == maxStatusPrompts {
			truncated = true
			break
		}
		out = append(out, mcpv1alpha1.PromptInfo{
			Name:        p.Name,
			Title:       connector.TruncateUTF8(p.Title, maxPromptTitleLength),
			Description: connector.TruncateUTF8(p.Description, maxPromptDescLength),
		})
	}
	if len(out) == 0 {
		return nil, truncated
	}
	return out, truncated
}

// statusURI is a resource URI (or URI template) as status may show it: without its
// query string and without user information, either of which may carry a secret. The
// rest is kept byte for byte, so that it still names the resource the server lists.
//
// The query starts at the first '?' (in a template, the first outside an expression:
// {?q} is the template's own). User information is what precedes the last '@' of the
// authority, which starts after "<scheme>://" and is taken to end at the next '/' only:
// a '?' or '#' before an '@' there is part of a malformed password as likely as not
// ("https://user:pa#ss@host/"), and the whole of it goes.
func statusURI(uri string, template bool) string {
	if scheme, rest, ok := strings.Cut(uri, "//"); ok && strings.HasSuffix(scheme, ":") && !strings.ContainsAny(scheme, "/?#") {
		authority, _, _ := strings.Cut(rest, "/")
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			uri = scheme + "//" + rest[at+1:]
		}
	}
	return uri[:queryStart(uri, template)]
}

// queryStart returns where uri's query string starts, or len(uri) when it has none.
// In a template, a '?' inside an expression ({?q}, {&r}) is not a query.
func queryStart(uri string, template bool) int {
	depth := 0
	for i := 0; i < len(uri); i++ {
		switch uri[i] {
		case '{':
			if template {
				depth++
			}
		case '}':
			if template && depth > 0 {
				depth--
			}
		case '?':
			if depth == 0 {
				return i
			}
		}
	}
	return len(uri)
}
