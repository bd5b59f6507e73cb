package gateway_test

import (
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/gateway"
)

// catalogToolIndex is the catalogue's ranking as a gateway.ToolIndex, as the manager
// wires it (cmd/switchboard).
func catalogToolIndex(tools []gateway.IndexedTool) gateway.ToolIndex {
	items := make([]catalog.IndexedTool, len(tools))
	for i, t := range tools {
		items[i] = catalog.IndexedTool(t)
	}
	return catalog.NewToolIndex(items)
}
