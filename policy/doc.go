// Package policy decides who may do what through the gateway: it compiles MCPAccessPolicy
// objects and answers, for one caller, one target (an MCPServer's or an MCPToolset's
// endpoint) and one request, whether the request runs, runs after the person approves
// it, or is refused, and why. It is the one home of that decision: every front door (MCP
// sessions, sessionless 2026-07-28 requests, toolsets in both discovery modes) calls
// Decide with the same inputs, and Listable for tools/list.
//
// Decisions are pure data, like egress: policy does no I/O (no network, no files, no
// Kubernetes client) and knows nothing of the gateway's or the identity package's types.
// The front doors convert their caller and request into Caller, Target and Request.
//
// The flow is: Compile turns one MCPAccessPolicy into a Compiled policy, compiling every
// `when` expression once (a caller keeps the Compiled value per generation); Decide and
// Listable take the compiled policies of the target's namespace. Everything compiled is
// immutable and safe for concurrent use.
//
// Semantics, as in NetworkPolicy and MCPEgressPolicy:
//   - A target no Enforce policy selects behaves as if no access policy existed: Decide
//     allows, with a reason that says so. RBAC `use` stays the door in every case.
//   - Once an Enforce policy selects a target, a tools/call runs only if a rule of a
//     selecting Enforce policy allows it. resources/read and prompts/get are governed the
//     same way once a selecting Enforce policy has a rule that names resources, or
//     prompts (NetworkPolicy's egress: a policy that says nothing of it leaves it alone).
//   - Deny wins over everything, across all selecting policies; RequireApproval wins over
//     Allow.
//   - A rule whose `when` fails at run time, or runs out of cost budget, acts as a Deny
//     rule: the request is refused and the reason names the rule and the failure.
//   - A policy that does not compile is kept in a fail-closed form (see Compile): it
//     denies every request to what it selects.
//   - Audit policies are evaluated with the Enforce ones, as if they were enforced, and
//     the result is reported in Verdict.Audit; they never refuse anything.
//
// Results are deterministic: policies are considered in namespace/name order and rules in
// their order, and the verdict names the first policy and rule that decided.
package policy
