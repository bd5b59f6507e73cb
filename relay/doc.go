// Package relay moves JSON-RPC messages between two go-sdk connections, in both
// directions, one message at a time. It is the one relay loop of Switchboard: the bridge
// runs it between a Streamable HTTP server transport and a subprocess's stdio, and the
// gateway between an agent's session and an upstream session the connector built.
//
// The package owns:
//   - the two loops that read a message from one side and write it to the other;
//   - the hook points policy plugs into: a Hook sees every message in each direction and
//     may forward it, forward a rewrite, drop it, or answer it locally without the other
//     side ever seeing it; WriteFailed and Closed say what a failed write or a side that
//     closed means to the owner;
//   - the end of a relay: once a side closes, the other side is closed too (unless the
//     owner's Closed hook takes that over), so whoever is there sees the session end.
//
// It must not: speak HTTP or know about Kubernetes; frame messages itself (go-sdk's
// transports read and write jsonrpc.Message values on both sides; never hand-roll
// JSON-RPC framing); proxy through an mcp.Client or mcp.Server, which would re-interpret
// messages; or keep policy of its own. Per-request bookkeeping (which calls are owed an
// answer, tool filters, audit) belongs to the hooks of the package that runs the relay.
// It imports only go-sdk and the standard library.
package relay
