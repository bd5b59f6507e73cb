package toolsets

// StatusFeatures returns the resources, resource templates and prompts a selected
// server offers as its status lists them (at most 256 of each kind, URIs without query
// string or user information), as the origin ExposeFeatures takes. It is what the
// MCPToolset's status and the catalogue count and list; the gateway exposes what the
// origins list live, under the same rules.
func StatusFeatures(s Selected) FeatureOrigin {
	o := FeatureOrigin{Server: s.Name, Prefix: s.Prefix}
	if s.Server == nil {
		return o
	}
	st := &s.Server.Status
	for _, r := range st.Resources {
		if r.URITemplate != "" {
			o.Templates = append(o.Templates, r.URITemplate)
		} else if r.URI != "" {
			o.Resources = append(o.Resources, r.URI)
		}
	}
	for _, p := range st.Prompts {
		o.Prompts = append(o.Prompts, p.Name)
	}
	return o
}
