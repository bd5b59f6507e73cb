package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// defaultMaxHops is RedirectRules.MaxHops when a policy leaves it unset (the CRD default).
const defaultMaxHops = 3

// maxMaxHops is the largest RedirectRules.MaxHops the CRD admits.
const maxMaxHops = 10

// PolicySet is a compiled snapshot of every MCPEgressPolicy plus the manager's defaults.
// It is immutable once Compile returns it and safe for concurrent use; when policies
// change, compile a new set and swap it in.
type PolicySet struct {
	defaults Defaults
	// byNamespace holds each namespace's policies (invalid ones in their fail-closed
	// form) sorted by name, so that decisions and rendered NetworkPolicies do not depend
	// on the order the cache listed them in.
	byNamespace map[string][]*policy
}

// PolicyError reports an MCPEgressPolicy that could not be compiled. The controller shows
// Err on the policy as Accepted=False, reason InvalidPolicy.
//
// Compile keeps such a policy in the set in a fail-closed form: it still selects servers
// but allows nothing and follows no redirect, so a broken policy never opens what it was
// written to restrict. When its selector itself is invalid it selects every server in its
// namespace. The valid policies are enforced as usual, and their allows still apply to
// the servers the broken one selects.
type PolicyError struct {
	// Namespace and Name identify the policy.
	Namespace, Name string
	// Err lists what is wrong, with field paths such as spec.egress[0].to[1].ipBlock.cidr.
	Err error
}

// Error implements error.
func (e *PolicyError) Error() string {
	return fmt.Sprintf("egress policy %s/%s: %v", e.Namespace, e.Name, e.Err)
}

// Unwrap returns the underlying error.
func (e *PolicyError) Unwrap() error { return e.Err }

// policy is one compiled MCPEgressPolicy.
type policy struct {
	// name is "namespace/name".
	name     string
	selector labels.Selector
	// invalid is set when the policy did not compile; it then has no rules.
	invalid  bool
	rules    []rule
	redirect mcpv1alpha1.RedirectPolicyType
	maxHops  int
}

// rule is one compiled egress rule. A rule with no peers matches nothing: the CRD says an
// empty "to" matches no destination. This differs on purpose from NetworkPolicy, where an
// empty "to" means everywhere: a rule that lists only ports must not open every address.
type rule struct {
	hosts    []hostPattern
	ipBlocks []ipBlock
	// ports is empty when the rule allows every port.
	ports []uint16
}

// ipBlock is a compiled IPBlock: normalized (masked, IPv4-mapped prefixes unmapped).
type ipBlock struct {
	cidr   netip.Prefix
	except []netip.Prefix
}

// contains reports whether the normalized addr lies in the block and in none of its
// exceptions.
func (b ipBlock) contains(addr netip.Addr) bool {
	if !b.cidr.Contains(addr) {
		return false
	}
	for _, e := range b.except {
		if e.Contains(addr) {
			return false
		}
	}
	return true
}

// Compile compiles policies and the manager's defaults into a PolicySet. A policy that
// cannot be compiled (one that slipped past admission validation, for example with a bad
// selector or CIDR) is reported in the returned errors, one per policy, and enforced in
// the fail-closed form PolicyError describes; the others are enforced as written. The set
// never fails as a whole.
func Compile(policies []mcpv1alpha1.MCPEgressPolicy, defaults Defaults) (*PolicySet, []*PolicyError) {
	ps := &PolicySet{
		defaults:    normalizeDefaults(defaults),
		byNamespace: map[string][]*policy{},
	}
	var errs []*PolicyError
	for i := range policies {
		p, err := compilePolicy(&policies[i])
		if err != nil {
			errs = append(errs, &PolicyError{Namespace: policies[i].Namespace, Name: policies[i].Name, Err: err})
		}
		ps.byNamespace[policies[i].Namespace] = append(ps.byNamespace[policies[i].Namespace], p)
	}
	for _, list := range ps.byNamespace {
		slices.SortFunc(list, func(a, b *policy) int { return strings.Compare(a.name, b.name) })
	}
	return ps, errs
}

// Validate reports whether a single policy compiles, with the same errors Compile would
// give. The MCPEgressPolicy controller uses it to set the Accepted condition.
func Validate(p *mcpv1alpha1.MCPEgressPolicy) error {
	_, err := compilePolicy(p)
	return err
}

// compilePolicy compiles one policy, collecting every field error. On error it still
// returns the fail-closed form of the policy (see PolicyError).
func compilePolicy(p *mcpv1alpha1.MCPEgressPolicy) (*policy, error) {
	out, errs := compileSpec(p)
	if len(errs) == 0 {
		return out, nil
	}
	closed := &policy{name: out.name, selector: out.selector, invalid: true, redirect: mcpv1alpha1.RedirectDeny}
	if closed.selector == nil {
		closed.selector = labels.Everything()
	}
	return closed, errs.ToAggregate()
}

// normalizeDefaults fixes the posture (failing closed) and normalizes the cluster CIDRs,
// dropping invalid ones (Defaults.Validate reports them).
func normalizeDefaults(d Defaults) Defaults {
	out := Defaults{Posture: d.posture()}
	for _, p := range d.ClusterCIDRs {
		if p.IsValid() {
			out.ClusterCIDRs = append(out.ClusterCIDRs, normalizePrefix(p))
		}
	}
	return out
}

// compileSpec compiles a policy as written, collecting every field error.
func compileSpec(p *mcpv1alpha1.MCPEgressPolicy) (*policy, field.ErrorList) {
	var errs field.ErrorList
	spec := field.NewPath("spec")

	out := &policy{name: p.Namespace + "/" + p.Name, redirect: mcpv1alpha1.RedirectDeny, maxHops: defaultMaxHops}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.ServerSelector)
	if err != nil {
		errs = append(errs, field.Invalid(spec.Child("serverSelector"), field.OmitValueType{}, err.Error()))
	} else {
		out.selector = sel
	}

	for i, r := range p.Spec.Egress {
		cr, ruleErrs := compileRule(spec.Child("egress").Index(i), r)
		errs = append(errs, ruleErrs...)
		out.rules = append(out.rules, cr)
	}

	if r := p.Spec.Redirects; r != nil {
		path := spec.Child("redirects")
		switch r.Policy {
		case "":
		case mcpv1alpha1.RedirectDeny, mcpv1alpha1.RedirectSameOrigin, mcpv1alpha1.RedirectAllowedDestinations:
			out.redirect = r.Policy
		default:
			errs = append(errs, field.NotSupported(path.Child("policy"), r.Policy,
				[]mcpv1alpha1.RedirectPolicyType{mcpv1alpha1.RedirectDeny, mcpv1alpha1.RedirectSameOrigin, mcpv1alpha1.RedirectAllowedDestinations}))
		}
		if r.MaxHops != nil {
			if *r.MaxHops < 0 || *r.MaxHops > maxMaxHops {
				errs = append(errs, field.Invalid(path.Child("maxHops"), *r.MaxHops, fmt.Sprintf("must be between 0 and %d", maxMaxHops)))
			}
			out.maxHops = int(*r.MaxHops)
		}
	}

	return out, errs
}

// compileRule compiles one egress rule.
func compileRule(path *field.Path, r mcpv1alpha1.EgressRule) (rule, field.ErrorList) {
	var out rule
	var errs field.ErrorList
	for i, peer := range r.To {
		pp := path.Child("to").Index(i)
		switch {
		case peer.Host != "" && peer.IPBlock != nil:
			errs = append(errs, field.Invalid(pp, field.OmitValueType{}, "must set exactly one of host or ipBlock"))
		case peer.Host != "":
			h, err := parseHostPattern(peer.Host)
			if err != nil {
				errs = append(errs, field.Invalid(pp.Child("host"), peer.Host, err.Error()))
				continue
			}
			out.hosts = append(out.hosts, h)
		case peer.IPBlock != nil:
			b, blockErrs := compileIPBlock(pp.Child("ipBlock"), peer.IPBlock)
			errs = append(errs, blockErrs...)
			out.ipBlocks = append(out.ipBlocks, b)
		default:
			errs = append(errs, field.Required(pp, "must set one of host or ipBlock"))
		}
	}
	for i, port := range r.Ports {
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(path.Child("ports").Index(i).Child("port"), port.Port, "must be between 1 and 65535"))
			continue
		}
		out.ports = append(out.ports, uint16(port.Port))
	}
	return out, errs
}

// compileIPBlock parses and normalizes an IPBlock and checks that every exception lies
// inside the CIDR, as NetworkPolicy requires.
func compileIPBlock(path *field.Path, b *mcpv1alpha1.IPBlock) (ipBlock, field.ErrorList) {
	var errs field.ErrorList
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return ipBlock{}, field.ErrorList{field.Invalid(path.Child("cidr"), b.CIDR, "must be a valid CIDR such as 10.0.0.0/8")}
	}
	out := ipBlock{cidr: normalizePrefix(cidr)}
	for i, s := range b.Except {
		ep := path.Child("except").Index(i)
		e, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, field.Invalid(ep, s, "must be a valid CIDR such as 10.0.0.0/24"))
			continue
		}
		e = normalizePrefix(e)
		if e.Bits() < out.cidr.Bits() || !out.cidr.Contains(e.Addr()) {
			errs = append(errs, field.Invalid(ep, s, fmt.Sprintf("must lie inside cidr %s", out.cidr)))
			continue
		}
		out.except = append(out.except, e)
	}
	return out, errs
}
