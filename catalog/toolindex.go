package catalog

// ToolIndex ranks a fixed set of tools by a query the way the catalogue's search_tools
// ranks a server's tools: every term must match, a match in the name ranks above one in
// the title, above one in the description; a name equal to the whole query ranks first.
// A toolset endpoint in Search mode builds one over its exposed tools for find_tools. It
// is immutable once built and safe for concurrent use.
type ToolIndex struct {
	ix *index
}

// IndexedTool is one tool of a ToolIndex. Extra is more text to find the tool by, ranked
// like its description (a toolset passes the words of the tool's input schema).
type IndexedTool struct {
	Name, Title, Description, Extra string
}

// NewToolIndex indexes tools; names are unique, a later duplicate is dropped.
func NewToolIndex(tools []IndexedTool) *ToolIndex {
	e := &serverEntry{detail: &ServerDetail{}}
	indexed := make([]Tool, 0, len(tools))
	for _, t := range tools {
		desc := t.Description
		if t.Extra != "" {
			desc += " " + t.Extra
		}
		indexed = append(indexed, Tool{Name: t.Name, Title: t.Title, Description: desc})
	}
	e.tools = newToolEntries(e, sortedDistinctTools(indexed))
	ix := newIndex()
	ix.upsert(e)
	return &ToolIndex{ix: ix}
}

// Search returns the names of at most limit tools that match query, best first. An empty
// query matches every tool, in name order.
func (t *ToolIndex) Search(query string, limit int) []string {
	if limit <= 0 {
		return nil
	}
	matches, _ := t.ix.searchTools(parseQuery(query), nil, limit, func(*toolEntry) bool { return true })
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = m.tool.tool.Name
	}
	return names
}
