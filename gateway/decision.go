package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/policy"
)

// query is one request a front door asks the gateway's one decision (decide) about:
// who asks, what for, through which endpoint and connection, and the hooks that record
// the answer. Every front door fills it the same way: a server's endpoint in a session
// (session.go) or sessionless (stateless.go), and a toolset's in either era and either
// discovery mode (toolset_session.go, toolset_search.go).
type query struct {
	caller *identity.Caller
	// server is the MCPServer whose tool, resource or prompt is asked for.
	server connector.Key
	// toolset is the MCPToolset the request comes through, nil at a server's own
	// endpoint; exposed is the tool's name there.
	toolset *connector.Key
	exposed string

	// method is policy.MethodToolsCall, MethodResourcesRead or MethodPromptsGet.
	method string
	// tool is the server's name of the tool called; resource the URI read; prompt the
	// prompt's name.
	tool, resource, prompt string
	// arguments are the request's arguments exactly as they are forwarded (the bytes of
	// the one strict decoding of the request); decoded here once, only when an access
	// policy needs them.
	arguments json.RawMessage

	// conn is what the pin remembers of the upstream connection that carries the
	// request; nil for one not open yet, which has served nothing.
	conn *pinWatch
	// observe, when set, has the pin judge what the connection serves before a call is
	// judged (a sessionless request: see observePin); it returns why that failed, or "".
	observe func(ctx context.Context, srv *server) string

	// log writes the decision's audit lines besides the request's own ("Tools withheld",
	// "Access policy audit"), with who (key-value pairs) besides what log names itself.
	log logr.Logger
	who []any
	// record is the call span's record, when the front door keeps one (the decision is
	// recorded into it); nil records the decision as a child of ctx's span.
	record *spanRecord
	// audit writes the request's audit line for a refusal (with the reason and the
	// deciding policy and rule) and counts it; nil writes none.
	audit func(outcome string, kv ...any)
	// approve asks the calling client's user to approve a request a policy requires
	// approval for, and returns nil when they did; nil when the client cannot be asked.
	approve func(ctx context.Context, a approval) error
	// later says the front door asks for approval itself, after decide (settle): its
	// client's answer arrives on the loop decide runs on.
	later bool

	start time.Time // when the decision began
}

// approval is what the calling client's user is asked to approve.
type approval struct {
	// tool is the tool's name as the client knows it; where the call goes (a server,
	// or a toolset and its origin).
	tool, where string
	// arguments are the call's arguments as forwarded.
	arguments json.RawMessage
	// reason is the verdict's: the policy and rule that require the approval.
	reason string
}

// decide is the gateway's one decision about a request, for every front door and both
// eras. It runs, in this order, and the first that refuses decides:
//  1. the server still exists (and, through a toolset, is Ready and the caller may use
//     it: RBAC verb use on the origin as well as on the toolset);
//  2. for tools/call, the server's spec.tools allow and deny globs;
//  3. for tools/call of a pinned server, the pin (judgePin) on the connection that carries
//     the call;
//  4. the MCPAccessPolicies that select the endpoint (policy.Decide). Through a toolset
//     two endpoints are involved and both must allow: a policy selecting the server
//     governs its tools however they are reached, one selecting the toolset governs the
//     calls made through it (under the toolset's name of the tool). Deny wins over
//     RequireApproval, which wins over Allow.
//
// A request that needs approval is put to the client's user (q.approve) and refused when
// the client cannot be asked, or the user declines or cancels. Audit and tracing are
// hooks around the decision, fed by its verdict: the span's decision, the refusal's
// audit line (q.audit) with the deciding policy and rule, the "Access policy audit" line
// of an Audit policy that would have refused or asked, and the decisions metric.
func (g *Gateway) decide(ctx context.Context, q *query) policy.Verdict {
	q.start = time.Now()
	v := g.judge(ctx, q)
	if v.Effect == policy.EffectRequireApproval && q.later {
		return v
	}
	return g.settle(ctx, q, v)
}

// settle finishes decide's decision v: it asks for the approval v requires, and runs the
// hooks. A front door that asks later (query.later) calls it with decide's verdict.
func (g *Gateway) settle(ctx context.Context, q *query, v policy.Verdict) policy.Verdict {
	if v.Effect == policy.EffectRequireApproval {
		v = g.askApproval(ctx, q, v)
	}
	why := ""
	if v.Effect == policy.EffectDeny {
		why = v.Reason
	}
	if q.record != nil {
		q.record.decided(q.start, why)
	} else {
		policySpan(ctx, q.start, why)
	}
	if why != "" && q.audit != nil {
		q.audit(outcomeDenied, append([]any{"reason", why}, verdictKV(v)...)...)
	}
	return v
}

// refused is a verdict that refuses for why, decided by no access policy.
func refused(why string) policy.Verdict {
	return policy.Verdict{Effect: policy.EffectDeny, Reason: why, Rule: -1}
}

// allowed is the verdict of a request no access policy governs.
var allowed = policy.Verdict{Effect: policy.EffectAllow, Rule: -1}

// judge runs decide's checks, before any approval.
func (g *Gateway) judge(ctx context.Context, q *query) policy.Verdict {
	srv := g.server(q.server)
	if srv == nil {
		return refused(errServerDeleted.Error())
	}
	if q.toolset != nil {
		switch {
		case !srv.ready:
			return refused(fmt.Sprintf("MCPServer %s is not Ready (%s): %s", q.server, srv.reason, srv.message))
		case !g.mayUse(ctx, q.caller, q.server):
			return refused(fmt.Sprintf("%s may not use MCPServer %s (it needs verb %q on mcpservers.%s %q in namespace %q)",
				q.caller.Username, q.server, UseVerb, mcpv1alpha1.GroupVersion.Group, q.server.Name, q.server.Namespace))
		}
	}
	if q.method == policy.MethodToolsCall {
		if why := srv.toolRefusal(q.tool); why != "" {
			return refused(why)
		}
		if srv.pinned != "" {
			if q.observe != nil {
				if why := q.observe(ctx, srv); why != "" {
					return refused(why)
				}
			}
			conn := q.conn
			if conn == nil {
				conn = &pinWatch{}
			}
			if why := g.judgePin(pinCheck{srv: srv, conn: conn, audit: q.log, who: q.who, tool: q.tool}); why != "" {
				return refused(why)
			}
		}
	}
	return g.judgePolicies(q, srv)
}

// judgePolicies is decide's last check: the access policies of the endpoint (and, through
// a toolset, of its origin server).
func (g *Gateway) judgePolicies(q *query, srv *server) policy.Verdict {
	policies := g.policies.in(q.server.Namespace)
	if len(policies) == 0 {
		return allowed
	}
	st := serverTarget(srv)
	enforce, audit := selecting(policies, st)
	var tt policy.Target
	throughToolset := false
	if q.toolset != nil {
		tt = g.toolsetTarget(*q.toolset)
		te, ta := selecting(policies, tt)
		throughToolset = te || ta
		enforce, audit = enforce || te, audit || ta
	}
	if !enforce && !audit {
		return allowed
	}
	req := policy.Request{Method: q.method, Resource: q.resource, Prompt: q.prompt}
	if q.method == policy.MethodToolsCall {
		req.Tool = g.policyTool(srv, q.tool)
	}
	var v policy.Verdict
	args, err := decodeArguments(q.arguments)
	if err != nil {
		v = refused(fmt.Sprintf("the arguments of %s %s are not a JSON object, and access policies judge the arguments of every request to MCPServer %s",
			printableMethod(q.method), quoteName(q.loggedName()), q.server))
	} else {
		req.Arguments = args
		caller := policyCaller(q.caller)
		v = policy.Decide(caller, st, req, policies)
		if throughToolset {
			// A policy that selects the toolset sees what the client asked for by the
			// toolset's names: the exposed tool, resource URI or prompt.
			exposed := req
			switch q.method {
			case policy.MethodResourcesRead:
				exposed.Resource = q.exposed
			case policy.MethodPromptsGet:
				exposed.Prompt = q.exposed
			default:
				exposed.Tool.Name = q.exposed
			}
			v = both(v, policy.Decide(caller, tt, exposed, policies))
		}
	}
	if enforce {
		g.metrics.policyDecisions.WithLabelValues(string(v.Effect), string(mcpv1alpha1.AccessPolicyEnforce)).Inc()
	}
	if audit && v.Audit != nil {
		g.metrics.policyDecisions.WithLabelValues(string(v.Audit.Effect), string(mcpv1alpha1.AccessPolicyAudit)).Inc()
		if v.Audit.Effect != policy.EffectAllow {
			q.log.Info("Access policy audit", append(append([]any(nil), q.who...),
				"method", printableMethod(q.method), "name", clip(q.loggedName()), "effect", string(v.Audit.Effect),
				"reason", v.Audit.Reason, "policy", v.Audit.Policy, "rule", v.Audit.Rule)...)
		}
	}
	return v
}

// nameAsked is the name of what the request asks for, as the client named it.
// loggedName is nameAsked as refusals and audit lines may show it: a resource URI
// without its query string, which may carry a secret (the policy's own reasons drop it
// too).
func (q *query) loggedName() string {
	name := q.nameAsked()
	if q.method == policy.MethodResourcesRead {
		name, _, _ = strings.Cut(name, "?")
	}
	return name
}

func (q *query) nameAsked() string {
	switch q.method {
	case policy.MethodResourcesRead:
		return q.resource
	case policy.MethodPromptsGet:
		return q.prompt
	}
	if q.toolset != nil {
		return q.exposed
	}
	return q.tool
}

// printableMethod names a method the decision judges, for a reason.
func printableMethod(method string) string {
	switch method {
	case policy.MethodResourcesRead:
		return "resource"
	case policy.MethodPromptsGet:
		return "prompt"
	}
	return "tool"
}

// rank orders effects from the least to the most restrictive.
func rank(e policy.Effect) int {
	switch e {
	case policy.EffectDeny:
		return 2
	case policy.EffectRequireApproval:
		return 1
	}
	return 0
}

// both combines the verdicts of the origin server's and the toolset's endpoints, each of
// which must allow: the more restrictive decides (the server's on a tie), and the audit
// verdicts combine alike.
func both(server, toolset policy.Verdict) policy.Verdict {
	v := server
	if rank(toolset.Effect) > rank(server.Effect) {
		v = toolset
	}
	v.Audit = nil
	if server.Audit != nil || toolset.Audit != nil {
		a, b := auditOf(server), auditOf(toolset)
		if rank(b.Effect) > rank(a.Effect) {
			a = b
		}
		v.Audit = &a
	}
	return v
}

// auditOf is what v would be with Audit policies enforced too.
func auditOf(v policy.Verdict) policy.Verdict {
	if v.Audit != nil {
		return *v.Audit
	}
	v.Audit = nil
	return v
}

// decodeArguments decodes the arguments of a request as they are forwarded: absent or
// null is none; anything but one JSON object is an error.
func decodeArguments(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var args map[string]any
	if err := jsonv2.Unmarshal(raw, &args); err != nil {
		return nil, err
	}
	return args, nil
}

// verdictKV are the audit line's fields of the access policy that decided v, if one did.
func verdictKV(v policy.Verdict) []any {
	if v.Policy == "" {
		return nil
	}
	return []any{"policy", v.Policy, "rule", v.Rule}
}

// maxApprovalArguments bounds the arguments an approval request shows.
const maxApprovalArguments = 1024

// errNoApproval is the refusal of a request that needs approval from a client that
// cannot be asked.
var errNoApproval = errors.New("this client cannot be asked for approval: it did not declare the elicitation capability")

// askApproval puts a request a policy requires approval for to the calling client's user
// and returns the verdict: Allow when they approved, Deny otherwise, naming the policy
// and rule either way.
func (g *Gateway) askApproval(ctx context.Context, q *query, v policy.Verdict) policy.Verdict {
	var err error
	if q.approve == nil {
		err = errNoApproval
	} else {
		err = q.approve(ctx, q.approval(v))
	}
	if err != nil {
		v.Effect = policy.EffectDeny
		v.Reason = fmt.Sprintf("%s; refused: %v", v.Reason, err)
		return v
	}
	v.Effect = policy.EffectAllow
	v.Reason += "; approved by the caller's user"
	return v
}

// approval is what the user is asked to approve about q, which v requires approval for.
func (q *query) approval(v policy.Verdict) approval {
	where := "MCPServer " + q.server.String()
	if q.toolset != nil {
		where = fmt.Sprintf("MCPToolset %s (MCPServer %s)", q.toolset, q.server)
	}
	return approval{tool: q.nameAsked(), where: where, arguments: q.arguments, reason: v.Reason}
}

// message is what the user is asked: the tool, where it runs, its arguments (clipped)
// and the policy that asks.
func (a approval) message() string {
	args := string(a.arguments)
	if args == "" {
		args = "{}"
	}
	args = tracing.ClipTo(args, maxApprovalArguments)
	return fmt.Sprintf("Approve a call of tool %s on %s with arguments %s? (%s)", quoteName(a.tool), a.where, args, a.reason)
}

// listable reports whether tools/list shows the caller a tool of srv (called tool there,
// exposed through the toolset q names, if any): spec.tools lets it through, and the
// access policies of the server (and of the toolset) let the caller call it, or ask
// for approval to (policy.Listable).
func (g *Gateway) listable(q *query, srv *server, tool, exposed string) bool {
	if srv.toolRefusal(tool) != "" {
		return false
	}
	policies := g.policies.in(srv.namespace)
	if len(policies) == 0 {
		return true
	}
	caller := policyCaller(q.caller)
	if !policy.Listable(caller, serverTarget(srv), g.policyTool(srv, tool), policies) {
		return false
	}
	if q.toolset == nil {
		return true
	}
	t := g.policyTool(srv, tool)
	t.Name = exposed
	return policy.Listable(caller, g.toolsetTarget(*q.toolset), t, policies)
}

// mayUse reports whether caller may use the server key names (cached like every access
// review); a failed review counts as no.
func (g *Gateway) mayUse(ctx context.Context, caller *identity.Caller, key connector.Key) bool {
	if g.access == nil {
		return true
	}
	ok, err := g.access.allowed(ctx, caller, key)
	if err != nil {
		g.log.Error(err, "Could not review a caller's access", "server", key.Name)
		return false
	}
	return ok
}

// judgeList is decide's counterpart for a tools/list answer of srv's tools through one
// connection, in the same order: the server still exists; for a pinned server the pin
// judges the tools the connection served (listed gives them; complete when they are every
// page), and a list that is not the pinned tools is withheld (the error) and the
// connection's calls refused from then on; then shows says which tools the caller sees
// (listable: spec.tools and the access policies).
func (g *Gateway) judgeList(q *query, listed func() (tools []connector.Tool, complete bool, err error)) (srv *server, shows func(tool string) bool, err error) {
	srv = g.server(q.server)
	if srv == nil {
		return nil, nil, errServerDeleted
	}
	if srv.pinned != "" {
		tools, complete, err := listed()
		if err != nil {
			return nil, nil, err
		}
		conn := q.conn
		if conn == nil {
			conn = &pinWatch{}
		}
		if why := g.judgePin(pinCheck{srv: srv, conn: conn, audit: q.log, who: q.who,
			listed: tools, isList: true, complete: complete}); why != "" {
			return nil, nil, withheld(why)
		}
	}
	return srv, func(tool string) bool { return g.listable(q, srv, tool, tool) }, nil
}

// filtersList reports whether a tools/list answer of srv may show a caller less than it
// lists: spec.tools filters it or an access policy is known in its namespace.
func (g *Gateway) filtersList(srv *server) bool {
	return len(srv.allow) > 0 || len(srv.deny) > 0 || g.hasPolicies(srv.namespace)
}

// approvalSchema is the form of an approval request: nothing to fill in, accept or not.
var approvalSchema = map[string]any{"type": "object", "properties": map[string]any{}}

// elicitApproval returns how a request is put to the user of the client of ss, a
// session of the 2025-11-25 era: a form elicitation (elicitation/create) that shows the
// call; nil when the client did not declare form elicitation.
func elicitApproval(ss *mcp.ServerSession) func(context.Context, approval) error {
	p := ss.InitializeParams()
	if p == nil || p.Capabilities == nil || p.Capabilities.Elicitation == nil {
		return nil
	}
	if e := p.Capabilities.Elicitation; e.Form == nil && e.URL != nil {
		return nil
	}
	return func(ctx context.Context, a approval) error {
		res, err := ss.Elicit(ctx, &mcp.ElicitParams{Mode: "form", Message: a.message(), RequestedSchema: approvalSchema})
		return approvalAnswer(res, err)
	}
}

// approvalAnswer is nil when the user accepted, else why not.
func approvalAnswer(res *mcp.ElicitResult, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("the approval request failed: %w", err)
	case res.Action == "accept":
		return nil
	case res.Action == "decline":
		return errors.New("the user declined")
	case res.Action == "cancel":
		return errors.New("the user cancelled")
	}
	return fmt.Errorf("the client answered the approval request with action %s", quoteName(res.Action))
}
