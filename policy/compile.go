package policy

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Compiled is one MCPAccessPolicy, compiled: its selection, its rules and their
// programs. It is immutable and safe for concurrent use.
type Compiled struct {
	namespace, name string
	// key is "namespace/name", the order Decide considers policies in.
	key         string
	generation  int64
	enforcement mcpv1alpha1.AccessPolicyEnforcement

	// refs are the targetRefs; selector the targetSelector, nil with refs.
	refs     []mcpv1alpha1.AccessPolicyTargetRef
	selector labels.Selector

	rules []rule
	// index says which rules a caller and a kind of request can reach.
	index ruleIndex
	// governs says which request kinds the policy governs: tools always, resources and
	// prompts when a rule names them.
	governs [kindCount]bool

	// untracked is true when the policy's conditions are evaluated without CEL's cost
	// tracking: each is bounded (see condition), and together they cost at most the
	// policy's budget.
	untracked bool

	// invalid is why the policy did not compile; a policy in this fail-closed form
	// governs every kind and denies every request to what it selects.
	invalid error
}

// requestKind is what a request asks for: a tool, a resource or a prompt.
type requestKind int

const (
	kindTool requestKind = iota
	kindResource
	kindPrompt
	kindCount
)

// rule is one compiled rule.
type rule struct {
	index  int
	action mcpv1alpha1.AccessPolicyAction
	// globs per request kind; empty when the rule does not name that kind.
	globs [kindCount][]glob
	// when is the compiled condition; its program is nil when the rule has none. (The
	// subjects are in the policy's ruleIndex.)
	when condition
}

// conditional reports whether r has a condition.
func (r *rule) conditional() bool { return r.when.program != nil }

// subject is one compiled subject: the username or group a caller must have.
type subject struct {
	// username, when set, must equal the caller's username (User, ServiceAccount).
	username string
	// group, when set, must be one of the caller's groups (Group).
	group string
}

// Namespace returns the policy's namespace.
func (c *Compiled) Namespace() string { return c.namespace }

// Name returns the policy's name.
func (c *Compiled) Name() string { return c.name }

// Generation returns the metadata.generation the policy was compiled from.
func (c *Compiled) Generation() int64 { return c.generation }

// Enforcement returns Enforce or Audit.
func (c *Compiled) Enforcement() mcpv1alpha1.AccessPolicyEnforcement { return c.enforcement }

// Err returns why the policy did not compile, or nil.
func (c *Compiled) Err() error { return c.invalid }

// Selects reports whether the policy applies to t: t is in the policy's namespace and
// named by targetRefs or matched by targetSelector.
func (c *Compiled) Selects(t Target) bool {
	if t.Namespace != c.namespace {
		return false
	}
	if c.selector != nil {
		return c.selector.Matches(labels.Set(t.Labels))
	}
	for _, r := range c.refs {
		if r.Kind == t.Kind && r.Name == t.Name {
			return true
		}
	}
	return false
}

// ExpressionError reports a rule's `when` that cannot be used: it does not compile, does
// not evaluate to a bool, or may cost more than an expression may spend. The controller
// shows it as Ready=False, reason InvalidExpression.
type ExpressionError struct {
	// Rule is the index of the rule in spec.rules.
	Rule int
	// Problem says what is wrong, in words a person understands.
	Problem string
}

// Error implements error.
func (e *ExpressionError) Error() string {
	return fmt.Sprintf("spec.rules[%d].when %s", e.Rule, e.Problem)
}

// Compile compiles p. It always returns a usable *Compiled. When p cannot be compiled
// (a `when` expression that is not usable, which is an *ExpressionError, or a
// targetSelector that cannot be parsed), the error says what is wrong, every problem
// joined, and the returned policy is p's fail-closed form: it selects what p selects
// (every MCPServer and MCPToolset of its namespace when the selector itself is invalid)
// and denies every request to them, in p's enforcement mode. A broken policy never opens
// what it was written to restrict.
func Compile(p *mcpv1alpha1.MCPAccessPolicy) (*Compiled, error) {
	c := &Compiled{
		namespace:   p.Namespace,
		name:        p.Name,
		key:         p.Namespace + "/" + p.Name,
		generation:  p.Generation,
		enforcement: p.Spec.Enforcement,
		refs:        p.Spec.TargetRefs,
	}
	if c.enforcement == "" {
		c.enforcement = mcpv1alpha1.AccessPolicyEnforce
	}
	var errs []error
	switch {
	case p.Spec.TargetSelector != nil:
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.TargetSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.targetSelector is invalid: %w", err))
			sel = labels.Everything()
		}
		c.selector = sel
	case len(p.Spec.TargetRefs) == 0:
		// Admission requires one of them; a policy that has neither selects nothing.
		c.refs = nil
	}
	c.governs[kindTool] = true
	env, err := celEnv()
	if err != nil {
		// The environment is built from constants: this is a programming error.
		errs = append(errs, fmt.Errorf("building the CEL environment: %w", err))
	}
	if n := len(p.Spec.Rules); n > maxRules {
		// Admission refuses such a policy; one written around it is not half applied.
		errs = append(errs, fmt.Errorf("spec.rules has %d rules, more than the %d a policy may have", n, maxRules))
	}
	for i, r := range p.Spec.Rules {
		if i == maxRules {
			break
		}
		cr := rule{index: i, action: r.Action}
		cr.globs[kindTool] = compileGlobs(r.Tools, true)
		cr.globs[kindResource] = compileGlobs(r.Resources, false)
		cr.globs[kindPrompt] = compileGlobs(r.Prompts, true)
		if len(r.Resources) > 0 {
			c.governs[kindResource] = true
		}
		if len(r.Prompts) > 0 {
			c.governs[kindPrompt] = true
		}
		if strings.TrimSpace(r.When) != "" && env != nil {
			when, err := compileCondition(env, i, r.When)
			if err != nil {
				errs = append(errs, err)
			} else {
				cr.when = *when
			}
		}
		c.index.add(i, &cr, r.Subjects)
		c.rules = append(c.rules, cr)
	}
	if err := errors.Join(errs...); err != nil {
		c.invalid = err
		c.rules, c.index = nil, ruleIndex{}
		c.governs = [kindCount]bool{true, true, true}
		return c, err
	}
	c.untracked = untracked(c.rules)
	return c, nil
}

// untracked reports whether every condition of rules is bounded, and all of them
// together (each rule pays for its own, as Decide charges them) within a policy's
// budget: no evaluation can then reach the per-call limit or the budget, and the
// conditions need no cost tracking.
func untracked(rules []rule) bool {
	var total uint64
	for i := range rules {
		w := &rules[i].when
		if w.program == nil {
			continue
		}
		if w.bounded == nil {
			return false
		}
		total += w.bound
	}
	return total <= policyBudget
}

// compileGlobs compiles globs once; names are the tool-name alphabet of toolglob.
func compileGlobs(patterns []string, names bool) []glob {
	out := make([]glob, len(patterns))
	for i, p := range patterns {
		out[i] = compileGlob(p, names)
	}
	return out
}

// compileSubject turns a subject into the username or group it matches.
func compileSubject(s mcpv1alpha1.AccessPolicySubject) subject {
	switch s.Kind {
	case mcpv1alpha1.AccessPolicySubjectGroup:
		return subject{group: s.Name}
	case mcpv1alpha1.AccessPolicySubjectServiceAccount:
		return subject{username: serviceAccountPrefix + s.Namespace + ":" + s.Name}
	default:
		return subject{username: s.Name}
	}
}

// serviceAccountPrefix starts the username of every Kubernetes ServiceAccount.
const serviceAccountPrefix = "system:serviceaccount:"

// allAuthenticated is the group every authenticated caller is in, listed by its
// authenticator or not (an MCPIdentityProvider caller's groups do not list it).
const allAuthenticated = "system:authenticated"

// anonymousUser is the caller of a gateway that authenticates nobody; as in Kubernetes,
// it is in allUnauthenticated and never in allAuthenticated.
const (
	anonymousUser      = "system:anonymous"
	allUnauthenticated = "system:unauthenticated"
)
