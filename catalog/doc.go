// Package catalog is Switchboard's catalogue service: it answers "which MCP servers and
// tools can I use?" for agents in the cluster, over REST (JSON under /api/v1, described by
// /api/v1/openapi.json) and over MCP (Streamable HTTP at /mcp, tools search_tools,
// list_servers, get_server and list_toolsets). It also lists MCPToolsets with their
// gateway paths and the resources, resource templates and prompts they expose (REST
// /api/v1/toolsets, MCP list_toolsets), scoped to the namespaces the caller may list
// mcpservers in, and lends its ranking to a toolset's find_tools ([ToolIndex]). What a
// toolset exposes is computed by internal/toolsets from the status of the MCPServers it
// selects, as the toolset's own status counts it.
//
// It serves the MCP Registry API under /v0.1 as well (registry.go): one server.json per
// MCPServer and MCPToolset, built with the registry module's own types, whose only remote
// is the object's gateway endpoint under the configured public URL; a caller sees the
// entries of namespaces it may list mcpservers in that it may also use.
//
// What it owns:
//   - an in-memory search index over tool name, title and description and server name
//     and description, fed incrementally by the manager's MCPServer informer;
//   - authentication of callers through an identity.Authenticator it builds from its
//     [Options] (TokenReview, ServiceAccount keys, MCPIdentityProviders) and lends to the
//     gateway ([Server.Authenticator]); a caller is an identity.Caller;
//   - authorization with SubjectAccessReview (list mcpservers, per namespace), on an API
//     client of its own, cached with a short TTL in a bounded LRU cache;
//   - the MCP endpoint's protocol eras, both served by one stateless go-sdk server: session
//     era clients (2025-11-25 and older) initialize and are never given a session ID;
//     2026-07-28 clients discover and send self-contained requests. Every request of
//     either era is authenticated on its own, and its body is read once, bounded and
//     judged by internal/mcpmsg before go-sdk reads exactly those bytes. server/discover
//     and tools/list carry caching hints: private (public only without authentication)
//     and fresh for five minutes; the tools capability does not offer list changes;
//   - the HTTP handler: routing, pagination, ETags, JSON errors, request bounds, per
//     request read and write deadlines and Prometheus metrics. The listener is not its
//     own: the manager serves [Server.Handler] beside the gateway's on one address
//     (internal/frontdoor), with no server-wide read or write timeout, since the
//     gateway's streams last as long as an agent's session.
//
// What it must not do:
//   - call MCP servers or the API server for MCPServer objects: it serves from the
//     informer cache only, so every manager replica answers without leader election;
//   - write anything to the cluster other than TokenReviews and SubjectAccessReviews, or
//     read anything but the informer cache and the ServiceAccount issuer's discovery
//     document and keys;
//   - return secrets: it copies only status fields (the endpoint as redacted in status,
//     never spec.http.url), labels and the spec description. Condition messages, which
//     name Secrets and keys, are replaced by a fixed message per reason. Header values,
//     Secret names, URL query strings and annotations never reach a response, an error
//     or a log line; tokens are kept only as SHA-256 digests;
//   - show a caller anything outside the namespaces it may list mcpservers in;
//   - authenticate, bound or time out gateway requests: the gateway does its own;
//   - import the gateway: what the gateway needs of the catalogue (its tool ranking, the
//     resource metadata's challenge) the manager hands it through the gateway's own
//     interfaces.
//
// The manager creates the service with [New] and serves its Handler on every replica,
// without leader election.
package catalog
