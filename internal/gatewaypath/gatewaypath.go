// Package gatewaypath names the paths of the gateway's endpoints on the manager's
// agent-facing address. The gateway serves them, the catalogue and the MCPToolset
// reconciler publish them and the manager routes them, so they live below all three.
//
// It must not import anything of Switchboard's: it is plain string building.
package gatewaypath

// Prefix starts the path of every gateway endpoint on the manager's agent-facing address;
// every other path there is the catalogue's.
const Prefix = "/mcp/namespaces/"

// Server returns the path of a server's endpoint on the gateway. Namespace and name are
// DNS names, so they need no escaping.
func Server(namespace, name string) string {
	return Prefix + namespace + "/servers/" + name
}

// Toolset returns the path of a toolset's endpoint on the gateway.
func Toolset(namespace, name string) string {
	return Prefix + namespace + "/toolsets/" + name
}
