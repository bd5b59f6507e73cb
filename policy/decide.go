package policy

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unique"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// maxErrorBytes bounds the CEL error a reason quotes.
const maxErrorBytes = 200

// Decide judges one request of caller to target under policies, the compiled
// MCPAccessPolicies of the target's namespace (policies of other namespaces, and those
// that do not select target, are ignored; nil entries too). See the package
// documentation for the semantics. Decide is pure: the same inputs give the same verdict.
func Decide(caller Caller, target Target, req Request, policies []*Compiled) Verdict {
	kind, governed := kindOf(req)
	if !governed {
		return Verdict{Effect: EffectAllow, Rule: -1,
			Reason: fmt.Sprintf("access policies do not govern %s", printable(req.Method))}
	}
	policies = sorted(policies)
	e := evaluations.Get().(*evaluation)
	*e = evaluation{caller: caller, target: target, req: req, kind: kind}
	defer e.release()
	v := e.decide(policies, false)
	for _, p := range policies {
		if p != nil && p.enforcement == mcpv1alpha1.AccessPolicyAudit && p.Selects(target) {
			audit := e.decide(policies, true)
			v.Audit = &audit
			break
		}
	}
	return v
}

// Listable reports whether tools/list shows tool to caller on target: true when no
// Enforce policy selects target, or when some rule of a selecting Enforce policy could
// allow the call (or allow it after approval) and no Deny rule without a `when` refuses
// it. `when` conditions are not evaluated, as the arguments are not known yet; a call
// that lists a tool may still be refused. Audit policies hide nothing.
func Listable(caller Caller, target Target, tool Tool, policies []*Compiled) bool {
	governed, allowed := false, false
	for _, p := range policies {
		if p == nil || p.enforcement != mcpv1alpha1.AccessPolicyEnforce || !p.Selects(target) {
			continue
		}
		governed = true
		if p.invalid != nil {
			return false
		}
		for i, rest, ok := p.index.reachable(&caller, kindTool).next(); ok; i, rest, ok = rest.next() {
			r := &p.rules[i]
			if !r.matches(kindTool, tool.Name) {
				continue
			}
			if r.action == mcpv1alpha1.AccessPolicyDeny {
				if !r.conditional() {
					return false
				}
				continue
			}
			allowed = true
		}
	}
	return !governed || allowed
}

// Sort sorts policies into the order Decide considers them in (namespace, then name).
// Decide sorts a copy of an unsorted slice on every call; a caller that keeps its
// policies sorted saves that.
func Sort(policies []*Compiled) {
	slices.SortFunc(policies, comparePolicies)
}

func comparePolicies(a, b *Compiled) int {
	if a == nil || b == nil {
		return cmp.Compare(boolInt(a != nil), boolInt(b != nil))
	}
	return cmp.Compare(a.key, b.key)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sorted returns policies in Decide's order, copying only when they are not in it.
func sorted(policies []*Compiled) []*Compiled {
	if slices.IsSortedFunc(policies, comparePolicies) {
		return policies
	}
	c := slices.Clone(policies)
	Sort(c)
	return c
}

// kindOf returns what the request asks for, and false for a method access policies do
// not govern.
func kindOf(req Request) (requestKind, bool) {
	switch req.Method {
	case MethodToolsCall:
		return kindTool, true
	case MethodResourcesRead:
		return kindResource, true
	case MethodPromptsGet:
		return kindPrompt, true
	}
	return 0, false
}

// evaluation is one Decide call: its inputs, and the CEL values built from them the first
// time a `when` needs them.
type evaluation struct {
	caller Caller
	target Target
	req    Request
	kind   requestKind

	// vars are the CEL variables, each built the first time an expression reads it;
	// resolved has bit i set once vars[i] is.
	vars     [len(varNames)]any
	resolved uint8
	// outcomes remembers each condition's outcome by its source: every variable it can
	// read is the same for all the rules of one Decide, so a condition several rules
	// share (the same guard copied into every policy) is evaluated once.
	outcomes []evaluated
	few      [4]evaluated

	// ctx bounds the time of the call's expressions (evalTimeout); created with the
	// first evaluation.
	ctx    context.Context
	cancel context.CancelFunc
}

// selected is a policy that selects the target, and the rules of it the caller and the
// request's kind can reach.
type selected struct {
	policy *Compiled
	rules  ruleSet
}

// evaluated is the outcome of one condition, by its source.
type evaluated struct {
	source unique.Handle[string]
	outcome
}

// evalTimeout bounds the time all the expressions of one Decide call may take. The cost
// limits bound the work CEL counts; this bounds what it does not count well: CEL's cost
// tracker itself grows quadratically with the iterations of a comprehension, so a long
// list in the arguments could otherwise hold a request for minutes within its cost limit.
// It is far above what any expression within the cost limits takes on a short list.
const evalTimeout = 250 * time.Millisecond

// evaluations are the evaluations of finished Decide calls, for the next ones: an
// evaluation holds the buffers of one Decide, and a call through the gateway is cheaper
// for not allocating them every time.
var evaluations = sync.Pool{New: func() any { return new(evaluation) }}

// release releases the evaluation's deadline and gives it back to evaluations, holding
// nothing of the call.
func (e *evaluation) release() {
	if e.cancel != nil {
		e.cancel()
	}
	*e = evaluation{}
	evaluations.Put(e)
}

// name returns what the request names: the tool, the resource URI or the prompt.
func (e *evaluation) name() string {
	switch e.kind {
	case kindResource:
		return e.req.Resource
	case kindPrompt:
		return e.req.Prompt
	}
	return e.req.Tool.Name
}

// what describes the request for a reason, such as `tool "delete_repo"`.
func (e *evaluation) what() string {
	return string(e.appendWhat(nil))
}

// appendWhat appends what to b.
func (e *evaluation) appendWhat(b []byte) []byte {
	switch e.kind {
	case kindResource:
		// A URI's query string may carry a secret; it never appears in a reason.
		uri, _, _ := strings.Cut(e.req.Resource, "?")
		return strconv.AppendQuote(append(b, "resource "...), uri)
	case kindPrompt:
		return strconv.AppendQuote(append(b, "prompt "...), e.req.Prompt)
	}
	return strconv.AppendQuote(append(b, "tool "...), e.req.Tool.Name)
}

// ruleReason is the reason of a verdict rule r of p decided: `rule 2 of access policy
// team-a/github-access denies tool "delete_repo" to "oidc:alice"`, or, when the
// verb is approval's, `requires approval for tool "delete_repo"`.
func (e *evaluation) ruleReason(p *Compiled, r *rule, verb string) string {
	b := make([]byte, 0, 160)
	b = strconv.AppendInt(append(b, "rule "...), int64(r.index), 10)
	b = append(append(b, " of access policy "...), p.key...)
	b = e.appendWhat(append(append(append(b, ' '), verb...), ' '))
	if verb != requiresApprovalFor {
		b = strconv.AppendQuote(append(b, " to "...), e.caller.Username)
	}
	return string(b)
}

// The verbs of ruleReason.
const (
	denies              = "denies"
	allows              = "allows"
	requiresApprovalFor = "requires approval for"
)

// decide evaluates the Enforce policies that select the target (and the Audit ones too
// when withAudit is set).
func (e *evaluation) decide(policies []*Compiled, withAudit bool) Verdict {
	name := e.name()
	// selecting are the policies that select the target, with the rules the caller
	// and the request's kind can reach in each.
	var buf [16]selected
	selecting := buf[:0]
	governed := false
	for _, p := range policies {
		if p == nil || (p.enforcement != mcpv1alpha1.AccessPolicyEnforce && !withAudit) || !p.Selects(e.target) {
			continue
		}
		if p.invalid != nil {
			return Verdict{Effect: EffectDeny, Policy: p.key, Rule: -1,
				Reason: fmt.Sprintf("access policy %s selects %s and is invalid, so it refuses every request: %v", p.key, e.targetName(), p.invalid)}
		}
		if p.governs[e.kind] {
			governed = true
		}
		selecting = append(selecting, selected{p, p.index.reachable(&e.caller, e.kind)})
	}
	if !governed {
		mode := "Enforce"
		if withAudit {
			mode = "Enforce or Audit"
		}
		return Verdict{Effect: EffectAllow, Rule: -1,
			Reason: fmt.Sprintf("no %s access policy governs the %ss of %s", mode, kindNoun(e.kind), e.targetName())}
	}

	// Deny rules first: Deny wins over everything, so nothing else needs evaluating once
	// one applies. A rule whose `when` fails acts as a Deny rule.
	for _, s := range selecting {
		p := s.policy
		budget := uint64(policyBudget)
		for i, rest, ok := (s.rules & p.index.deny).next(); ok; i, rest, ok = rest.next() {
			r := &p.rules[i]
			if !r.matches(e.kind, name) {
				continue
			}
			holds, err := e.holds(p, r, &budget)
			if err != nil {
				return e.failed(p, r, err)
			}
			if holds {
				return Verdict{Effect: EffectDeny, Policy: p.key, Rule: r.index, Reason: e.ruleReason(p, r, denies)}
			}
		}
	}
	var best *rule
	var bestPolicy *Compiled
	for _, s := range selecting {
		p := s.policy
		budget := uint64(policyBudget)
		for i, rest, ok := (s.rules &^ p.index.deny).next(); ok; i, rest, ok = rest.next() {
			r := &p.rules[i]
			if !r.matches(e.kind, name) {
				continue
			}
			// Every rule that could apply is evaluated, so that a failing one denies
			// whatever the order of the rules.
			holds, err := e.holds(p, r, &budget)
			if err != nil {
				return e.failed(p, r, err)
			}
			if holds && (best == nil || (r.action == mcpv1alpha1.AccessPolicyRequireApproval && best.action != r.action)) {
				best, bestPolicy = r, p
			}
		}
	}
	if best == nil {
		return Verdict{Effect: EffectDeny, Rule: -1,
			Reason: fmt.Sprintf("no rule of the access policies that select %s allows %s to %s", e.targetName(), e.what(), quote(e.caller.Username))}
	}
	if best.action == mcpv1alpha1.AccessPolicyRequireApproval {
		return Verdict{Effect: EffectRequireApproval, Policy: bestPolicy.key, Rule: best.index,
			Reason: e.ruleReason(bestPolicy, best, requiresApprovalFor)}
	}
	return Verdict{Effect: EffectAllow, Policy: bestPolicy.key, Rule: best.index, Reason: e.ruleReason(bestPolicy, best, allows)}
}

// failed is the verdict of a rule whose `when` could not be evaluated.
func (e *evaluation) failed(p *Compiled, r *rule, err error) Verdict {
	return Verdict{Effect: EffectDeny, Policy: p.key, Rule: r.index,
		Reason: fmt.Sprintf("rule %d of access policy %s could not be evaluated for %s, so the request is refused: %v", r.index, p.key, e.what(), err)}
}

func (e *evaluation) targetName() string {
	return string(e.target.Kind) + " " + e.target.Namespace + "/" + e.target.Name
}

func kindNoun(k requestKind) string {
	switch k {
	case kindResource:
		return "resource read"
	case kindPrompt:
		return "prompt get"
	}
	return "tool call"
}

// outcome is what evaluating one condition gave, and what it cost.
type outcome struct {
	holds bool
	err   error
	// cost is what the evaluation cost; costed is false for an evaluation without cost
	// tracking, whose cost is not known.
	cost   uint64
	costed bool
}

// holds evaluates r's condition (true without one), charging its cost to budget, the
// budget of p. A condition evaluated before in this Decide is not evaluated again, but
// its cost is charged again: each policy's budget pays for what its own rules need. The
// conditions of a policy whose budget they cannot exhaust are evaluated without cost
// tracking, and charge nothing (Compiled.untracked).
func (e *evaluation) holds(p *Compiled, r *rule, budget *uint64) (bool, error) {
	if !r.conditional() {
		return true, nil
	}
	tracked := !p.untracked
	o, seen := e.outcome(r.when.source, tracked)
	if !seen {
		o = e.evaluate(&r.when, tracked)
		e.remember(r.when.source, o)
	}
	if tracked {
		if o.cost > *budget {
			return false, fmt.Errorf("the policy's expressions cost more than the %d one policy may spend on one request", policyBudget)
		}
		*budget -= o.cost
	}
	return o.holds, o.err
}

// outcome returns the outcome of the condition source, if it was evaluated before (with
// cost tracking, when costed is set).
func (e *evaluation) outcome(source unique.Handle[string], costed bool) (outcome, bool) {
	for i := range e.outcomes {
		if e.outcomes[i].source == source {
			o := e.outcomes[i].outcome
			return o, o.costed || !costed
		}
	}
	return outcome{}, false
}

// remember records the outcome of the condition source.
func (e *evaluation) remember(source unique.Handle[string], o outcome) {
	for i := range e.outcomes {
		if e.outcomes[i].source == source {
			e.outcomes[i].outcome = o
			return
		}
	}
	if e.outcomes == nil {
		e.outcomes = e.few[:0]
	}
	e.outcomes = append(e.outcomes, evaluated{source, o})
}

// evaluate runs condition c once, with cost tracking when tracked is set (c.bounded is
// set otherwise).
func (e *evaluation) evaluate(c *condition, tracked bool) outcome {
	if !tracked {
		return e.evaluateUntracked(c)
	}
	var out ref.Val
	var details *cel.EvalDetails
	var err error
	if c.loops {
		if e.ctx == nil {
			e.ctx, e.cancel = context.WithTimeout(context.Background(), evalTimeout)
		}
		out, details, err = c.program.ContextEval(e.ctx, e)
	} else {
		out, details, err = c.program.Eval(e)
	}
	o := outcome{costed: true}
	if details != nil && details.ActualCost() != nil {
		o.cost = *details.ActualCost()
	}
	if err != nil && e.ctx != nil && e.ctx.Err() != nil {
		o.err = fmt.Errorf("the request's expressions ran longer than %v and were cancelled", evalTimeout)
		return o
	}
	return o.of(out, err)
}

// evaluateUntracked runs c.bounded once, as cel.Program's Eval runs a program: a
// panic in a function is an internal error. A condition whose guard fails is what the
// guard makes it.
func (e *evaluation) evaluateUntracked(c *condition) (o outcome) {
	for _, k := range c.guards {
		if _, ok := e.req.Arguments[k]; !ok {
			return outcome{holds: c.guardless}
		}
	}
	frame, err := interpreter.NewExecutionFrame(e)
	if err != nil {
		return o.of(nil, err)
	}
	defer frame.Close()
	defer func() {
		if r := recover(); r != nil {
			o = o.of(nil, fmt.Errorf("internal error: %v", r))
		}
	}()
	out := c.bounded.Exec(frame)
	if types.IsError(out) {
		return o.of(out, out.(*types.Err))
	}
	return o.of(out, nil)
}

// of completes o with the result of an evaluation: its value or its error.
func (o outcome) of(out ref.Val, err error) outcome {
	if err != nil {
		o.err = fmt.Errorf("when: %s", celErrorKind(err))
		return o
	}
	b, ok := out.(types.Bool)
	if !ok {
		o.err = fmt.Errorf("when evaluated to %s, not a bool", out.Type().TypeName())
		return o
	}
	o.holds = bool(b)
	return o
}

// celErrorKind is what a reason may say of a CEL evaluation error: its kind, the text
// before CEL's first ": " ("no such key", "error parsing regexp"), bounded. What
// follows is the value the expression failed on, which may be a caller's argument (a
// token, a URL with its query string): it reaches neither the caller's refusal nor the
// audit line.
func celErrorKind(err error) string {
	msg := err.Error()
	if !strings.HasPrefix(msg, "operation cancelled") && !strings.HasPrefix(msg, "operation interrupted") {
		// Those the interpreter says of itself ("operation cancelled: actual cost limit
		// exceeded") quote no value and are kept whole.
		msg, _, _ = strings.Cut(msg, ": ")
	}
	if len(msg) > maxErrorBytes {
		msg = strings.ToValidUTF8(msg[:maxErrorBytes], "") + "..."
	}
	return msg
}

// ResolveName implements interpreter.Activation, building each variable's value the first
// time an expression reads it.
func (e *evaluation) ResolveName(name string) (any, bool) {
	i := slices.Index(varNames[:], name)
	if i < 0 {
		return nil, false
	}
	if e.resolved&(1<<i) == 0 {
		e.vars[i] = e.build(name)
		e.resolved |= 1 << i
	}
	return e.vars[i], true
}

// varNames are the CEL variables a `when` sees, in the order of evaluation.vars.
var varNames = [...]string{varCaller, varTool, varArguments, varMethod, varResource, varPrompt, varTarget}

// noValues and noExtra are what CEL sees for absent arguments, claims and extra: empty
// maps, which CEL never writes to.
var (
	noValues = map[string]any{}
	noExtra  = map[string][]string{}
)

// build builds the value of the variable name.
func (e *evaluation) build(name string) any {
	switch name {
	case varCaller:
		extra := e.caller.Extra
		if extra == nil {
			extra = noExtra
		}
		claims := e.caller.Claims
		if claims == nil {
			claims = noValues
		}
		groups := e.caller.Groups
		if groups == nil {
			groups = []string{}
		}
		return map[string]any{"username": e.caller.Username, "uid": e.caller.UID, "groups": groups, "extra": extra, "claims": claims}
	case varTool:
		t := e.req.Tool
		return map[string]any{"name": t.Name, "annotations": map[string]any{
			"title":           t.Title,
			"readOnlyHint":    hint(t.ReadOnlyHint, false),
			"destructiveHint": hint(t.DestructiveHint, true),
			"idempotentHint":  hint(t.IdempotentHint, false),
			"openWorldHint":   hint(t.OpenWorldHint, true),
		}}
	case varArguments:
		if e.req.Arguments == nil {
			return noValues
		}
		return e.req.Arguments
	case varMethod:
		return e.req.Method
	case varResource:
		return map[string]any{"uri": e.req.Resource}
	case varPrompt:
		return map[string]any{"name": e.req.Prompt}
	}
	return map[string]any{"kind": string(e.target.Kind), "namespace": e.target.Namespace, "name": e.target.Name}
}

// Parent implements interpreter.Activation.
func (e *evaluation) Parent() interpreter.Activation { return nil }

// hint is an annotation's value, or the MCP default where the server says nothing.
func hint(v *bool, def bool) bool {
	if v == nil {
		return def
	}
	return *v
}

// matches reports whether r names the request's kind with a glob that matches name.
func (r *rule) matches(k requestKind, name string) bool {
	globs := r.globs[k]
	for i := range globs {
		g := &globs[i]
		if g.invalid {
			if r.action == mcpv1alpha1.AccessPolicyDeny {
				return true
			}
			continue
		}
		if g.matches(name) {
			return true
		}
	}
	return false
}

// quote quotes a name for a reason, escaping what could make it read as something else.
func quote(s string) string {
	return strconv.Quote(s)
}

// printable bounds a method name a caller sent before it is quoted in a reason.
func printable(method string) string {
	if len(method) > 64 {
		method = method[:64]
	}
	return quote(method)
}
