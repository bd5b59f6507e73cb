// Package mcpmsg is the one strict reading of what an MCP client sends. Every front door
// that judges a client message (the gateway's server and toolset endpoints, the bridge)
// decodes it here first, and decides only on what this package returns.
//
// Why it exists: Go's encoding/json matches object keys without regard to case and keeps
// the last of duplicate keys, while MCP servers (go-sdk, the TypeScript SDK) read the
// exact key and may keep the first. A message such as
// {"name":"delete_all","NAME":"echo"} is then judged as one tool and run as another. This
// package makes such a message invalid, so that every reader of what is forwarded reads
// the value that was judged:
//   - a body must be valid UTF-8 JSON, at most 1000 levels deep;
//   - no object, at any depth, may have two members whose names are equal after
//     unescaping ("name" and "n\u0061me") or under Unicode case folding ("name" and
//     "NAME");
//   - the members a decision is made on (the JSON-RPC envelope's jsonrpc, id, method,
//     params, result and error; params' name, arguments, cursor, uri and _meta; _meta's
//     progressToken) must be spelled exactly: a lone "NAME" is not "name" here, and is
//     refused rather than left for a case-insensitive reader to find.
//
// It must not: frame or re-encode messages (go-sdk's transports do that, and forward the
// params bytes that were checked here), keep state, or know about HTTP or Kubernetes.
package mcpmsg
