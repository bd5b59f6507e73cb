package egress

import (
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/labels"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// ServerRules is the egress and redirect policy of one MCPServer: the policies that
// select it, or the default posture when none does. It is immutable and safe for
// concurrent use. The connector calls DecideDial for every connection it opens (with the
// address actually dialed) and DecideRedirect for every redirect hop.
type ServerRules struct {
	// policies are the selecting policies, sorted by name; empty when none selects.
	policies []*policy
	defaults Defaults

	// redirect is the most permissive redirect policy among the selecting policies, and
	// redirectFrom the first policy (by name) that sets it. maxHops is the largest
	// maxHops among them, and maxHopsFrom the first policy that sets it.
	redirect     mcpv1alpha1.RedirectPolicyType
	redirectFrom string
	maxHops      int
	maxHopsFrom  string
}

// ForServer returns the rules of the MCPServer in namespace with the given labels. A nil
// PolicySet (before the first Compile) gives the public posture.
//
// When several policies select the server, egress is the union of their allows, and
// redirects follow the most permissive of their redirect policies (AllowedDestinations
// over SameOrigin over Deny) with the largest of their maxHops: like the egress rules,
// selecting policies only ever add what a server may do.
func (ps *PolicySet) ForServer(namespace string, serverLabels map[string]string) *ServerRules {
	if ps == nil {
		return &ServerRules{defaults: Defaults{Posture: PosturePublic}, redirect: mcpv1alpha1.RedirectDeny}
	}
	r := &ServerRules{defaults: ps.defaults, redirect: mcpv1alpha1.RedirectDeny}
	set := labels.Set(serverLabels)
	for _, p := range ps.byNamespace[namespace] {
		if !p.selector.Matches(set) {
			continue
		}
		first := len(r.policies) == 0
		r.policies = append(r.policies, p)
		if first || redirectRank(p.redirect) > redirectRank(r.redirect) {
			r.redirect, r.redirectFrom = p.redirect, p.name
		}
		if first || p.maxHops > r.maxHops {
			r.maxHops, r.maxHopsFrom = p.maxHops, p.name
		}
	}
	return r
}

// Equal reports whether r and o decide every dial and redirect alike. Rules are
// recomputed on every reconcile and every policy change; the connector compares them so
// that only a change of what they allow drops the connections the old rules admitted.
func (r *ServerRules) Equal(o *ServerRules) bool {
	if r == nil || o == nil {
		return r == o
	}
	return reflect.DeepEqual(r, o)
}

// redirectRank orders redirect policies from the least to the most permissive.
func redirectRank(p mcpv1alpha1.RedirectPolicyType) int {
	switch p {
	case mcpv1alpha1.RedirectSameOrigin:
		return 1
	case mcpv1alpha1.RedirectAllowedDestinations:
		return 2
	default:
		return 0
	}
}

// Selected reports whether at least one MCPEgressPolicy selects the server.
func (r *ServerRules) Selected() bool { return r != nil && len(r.policies) > 0 }

// Policies returns the names ("namespace/name") of the policies that select the server,
// sorted.
func (r *ServerRules) Policies() []string {
	if r == nil {
		return nil
	}
	names := make([]string, len(r.policies))
	for i, p := range r.policies {
		names[i] = p.name
	}
	return names
}

// DecideDial decides whether a connection to d may be opened. The checks run in order and
// the first one that decides wins:
//
//  1. the address (d.Addr, or d.Host when it is an IP literal), with IPv4-mapped IPv6
//     unmapped, must not be always denied (see AlwaysDenied);
//  2. the port must be set;
//  3. a server no policy selects follows the default posture;
//  4. a selected server needs an egress rule of a selecting policy whose ports include
//     d.Port and one of whose peers matches: a host peer matches d.Host (and so admits
//     whatever address that name resolved to), an ipBlock peer matches the address.
//
// When d.Addr is zero and d.Host is a name (a redirect target before resolution), ipBlock
// peers cannot match and the public posture allows the name, leaving the address to the
// check at dial time.
func (r *ServerRules) DecideDial(d Destination) Decision {
	if r == nil {
		return deny("", "no egress rules were computed for this server")
	}
	addr := dialAddr(d)
	dest := describe(d, addr)
	if reason, denied := AlwaysDenied(addr); denied {
		return deny("", reason)
	}
	if d.Port == 0 {
		return deny("", fmt.Sprintf("the connection to %s has no port", dest))
	}
	if !r.Selected() {
		return r.decideDefault(dest, addr)
	}
	for _, p := range r.policies {
		for i, rl := range p.rules {
			if rl.allows(d.Host, addr, d.Port) {
				return allow(p.name, fmt.Sprintf("spec.egress[%d] of MCPEgressPolicy %s allows %s", i, p.name, dest))
			}
		}
	}
	reason := fmt.Sprintf("no egress rule of %s allows %s", r.policyList(), dest)
	for _, p := range r.policies {
		if p.invalid {
			reason += fmt.Sprintf("; MCPEgressPolicy %s is invalid and allows nothing", p.name)
			break
		}
	}
	return deny(r.policies[0].name, reason)
}

// decideDefault applies the default posture to a server no policy selects.
func (r *ServerRules) decideDefault(dest string, addr netip.Addr) Decision {
	const unselected = "no MCPEgressPolicy selects this server and the default egress posture"
	switch r.defaults.Posture {
	case PostureAll:
		return allow("", fmt.Sprintf("%s %q allows %s", unselected, PostureAll, dest))
	case PosturePublic:
		if !addr.IsValid() {
			return allow("", fmt.Sprintf("%s %q allows %s, subject to the check of the address it resolves to", unselected, PosturePublic, dest))
		}
		if rng, ok := lookup(nonPublic, addr); ok {
			return deny("", fmt.Sprintf("%s is %s; %s %q allows public addresses only", addr, rng.what, unselected, PosturePublic))
		}
		for _, c := range r.defaults.ClusterCIDRs {
			if c.Contains(addr) {
				return deny("", fmt.Sprintf("%s is in the cluster range %s; %s %q allows public addresses only", addr, c, unselected, PosturePublic))
			}
		}
		return allow("", fmt.Sprintf("%s %q allows the public address of %s", unselected, PosturePublic, dest))
	default:
		return deny("", fmt.Sprintf("%s %q denies %s", unselected, PostureNone, dest))
	}
}

// allows reports whether the rule admits host (as in the URL), the normalized addr (zero
// when unknown) and port.
func (rl rule) allows(host string, addr netip.Addr, port uint16) bool {
	if len(rl.ports) > 0 && !slices.Contains(rl.ports, port) {
		return false
	}
	for _, h := range rl.hosts {
		if h.matches(host) {
			return true
		}
	}
	if addr.IsValid() {
		for _, b := range rl.ipBlocks {
			if b.contains(addr) {
				return true
			}
		}
	}
	return false
}

// DecideRedirect decides whether the connection may follow the redirect h. The checks run
// in order and the first one that decides wins:
//
//  1. both URLs are present, the hop count starts at 1, and the target has a host, no
//     userinfo and an http or https scheme;
//  2. https never redirects to http;
//  3. a 301, 302 or 303 answer to a method other than GET or HEAD is refused, because
//     HTTP clients (Go's included) follow it with a GET: an MCP POST would be lost;
//  4. a server no policy selects follows no redirect;
//  5. the selecting policies' redirect policy: Deny follows none; otherwise the hop must
//     be within maxHops, and SameOrigin needs the same scheme, host and port
//     (see SameOrigin) while AllowedDestinations needs DecideDial to allow the target's
//     host and port. The dial check still runs on the address the target resolves to.
//
// Whether configured headers go along is a separate question: send them only when
// SameOrigin(original request URL, target) holds.
func (r *ServerRules) DecideRedirect(h Redirect) Decision {
	if r == nil {
		return deny("", "no egress rules were computed for this server")
	}
	if h.From == nil || h.To == nil {
		return deny("", "the redirect has no source or target URL")
	}
	from, to := origin(h.From), origin(h.To)
	switch {
	case h.Hop < 1:
		return deny("", fmt.Sprintf("redirect to %s has hop number %d; hops count from 1", to, h.Hop))
	case h.To.Hostname() == "":
		return deny("", fmt.Sprintf("redirect to %s has no host", to))
	case h.To.User != nil:
		return deny("", fmt.Sprintf("redirect to %s carries credentials in the URL", to))
	case !isHTTPScheme(h.To.Scheme):
		return deny("", fmt.Sprintf("redirect to %s is not an http or https URL", to))
	case isScheme(h.From.Scheme, "https") && isScheme(h.To.Scheme, "http"):
		return deny("", fmt.Sprintf("redirect from %s to %s would downgrade https to http", from, to))
	case changesMethod(h.StatusCode, h.Method):
		return deny("", fmt.Sprintf("a %d redirect to %s would turn %s into GET", h.StatusCode, to, clip(h.Method, 16)))
	case !r.Selected():
		return deny("", fmt.Sprintf("no MCPEgressPolicy selects this server, so it follows no redirect (to %s)", to))
	case r.redirect == mcpv1alpha1.RedirectDeny:
		return deny(r.redirectFrom, fmt.Sprintf("%s follows no redirect (to %s)", r.policyList(), to))
	case h.Hop > r.maxHops:
		return deny(r.maxHopsFrom, fmt.Sprintf("redirect %d to %s exceeds maxHops %d of MCPEgressPolicy %s", h.Hop, to, r.maxHops, r.maxHopsFrom))
	}

	if r.redirect == mcpv1alpha1.RedirectSameOrigin {
		if !SameOrigin(h.From, h.To) {
			return deny(r.redirectFrom, fmt.Sprintf("redirect from %s to %s leaves the origin, and MCPEgressPolicy %s follows same-origin redirects only", from, to, r.redirectFrom))
		}
		return allow(r.redirectFrom, fmt.Sprintf("MCPEgressPolicy %s follows the same-origin redirect to %s", r.redirectFrom, to))
	}

	port, ok := effectivePort(h.To)
	if !ok {
		return deny("", fmt.Sprintf("redirect to %s has no valid port", to))
	}
	d := r.DecideDial(Destination{Scheme: strings.ToLower(h.To.Scheme), Host: h.To.Hostname(), Port: port})
	if !d.Allowed {
		return deny(d.Policy, fmt.Sprintf("redirect to %s is not to an allowed destination: %s", to, d.Reason))
	}
	return allow(r.redirectFrom, fmt.Sprintf("MCPEgressPolicy %s follows redirects to allowed destinations, and %s", r.redirectFrom, d.Reason))
}

// changesMethod reports whether following a redirect with this status turns the method
// into GET. Go's http.Client does so for 301, 302 and 303 unless the method is GET or
// HEAD; browsers do the same.
func changesMethod(status int, method string) bool {
	switch status {
	case 301, 302, 303:
		m := strings.ToUpper(method)
		return m != "GET" && m != "HEAD"
	default:
		return false
	}
}

// SameOrigin reports whether a and b have the same origin: the same scheme, the same host
// (ASCII case-insensitive, otherwise byte for byte) and the same port, where a missing
// port is the scheme's default (80 for http, 443 for https). Use it to decide whether
// configured headers may be sent to b when they were configured for a. Two URLs that are
// not both absolute with a host are never the same origin.
func SameOrigin(a, b *url.URL) bool {
	if a == nil || b == nil || a.Host == "" || b.Host == "" {
		return false
	}
	if !sameHost(a.Scheme, b.Scheme) || !sameHost(a.Hostname(), b.Hostname()) {
		return false
	}
	pa, okA := effectivePort(a)
	pb, okB := effectivePort(b)
	return okA && okB && pa == pb
}

// effectivePort returns u's port, or its scheme's default port when it has none.
func effectivePort(u *url.URL) (uint16, bool) {
	if s := u.Port(); s != "" {
		p, err := strconv.ParseUint(s, 10, 16)
		return uint16(p), err == nil && p != 0
	}
	switch {
	case isScheme(u.Scheme, "https"):
		return 443, true
	case isScheme(u.Scheme, "http"):
		return 80, true
	default:
		return 0, false
	}
}

// isScheme compares a URL scheme with a lower-case scheme name, ASCII case-insensitively.
func isScheme(scheme, want string) bool {
	s, ok := asciiLower(scheme)
	return ok && s == want
}

// isHTTPScheme reports whether scheme is http or https.
func isHTTPScheme(scheme string) bool {
	return isScheme(scheme, "http") || isScheme(scheme, "https")
}

// dialAddr returns the address to judge: d.Addr, or the IP literal in d.Host, normalized.
func dialAddr(d Destination) netip.Addr {
	if d.Addr.IsValid() {
		return normalizeAddr(d.Addr)
	}
	if a, err := netip.ParseAddr(d.Host); err == nil {
		return normalizeAddr(a)
	}
	return netip.Addr{}
}

// describe renders a destination for a reason: host:port, with the dialed address when
// it differs from the host.
func describe(d Destination, addr netip.Addr) string {
	port := strconv.Itoa(int(d.Port))
	host := clip(d.Host, 253)
	switch {
	case host == "" && addr.IsValid():
		return joinHostPort(addr.String(), port)
	case addr.IsValid() && addr.String() != host:
		return joinHostPort(host, port) + " (" + addr.String() + ")"
	default:
		return joinHostPort(host, port)
	}
}

// origin renders u as scheme://host:port for a reason. It never includes userinfo, path
// or query, which may carry secrets.
func origin(u *url.URL) string {
	scheme := clip(strings.ToLower(u.Scheme), 16)
	host := clip(u.Hostname(), 253)
	if p, ok := effectivePort(u); ok {
		return scheme + "://" + joinHostPort(host, strconv.Itoa(int(p)))
	}
	return scheme + "://" + host
}

// joinHostPort is net.JoinHostPort without importing the package that dials: egress does
// no I/O, and its linter rule forbids package net.
func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// clip cuts s to at most n bytes, on a rune boundary, so that a hostile redirect cannot
// bloat a status message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// policyList names the selecting policies for a reason, at most three of them.
func (r *ServerRules) policyList() string {
	if len(r.policies) == 1 {
		return "MCPEgressPolicy " + r.policies[0].name
	}
	names := r.Policies()
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("%d more", len(r.policies)-3))
	}
	return "the MCPEgressPolicies selecting this server (" + strings.Join(names, ", ") + ")"
}

// allow returns an allowing Decision.
func allow(policy, reason string) Decision {
	return Decision{Allowed: true, Policy: policy, Reason: reason}
}

// deny returns a denying Decision.
func deny(policy, reason string) Decision {
	return Decision{Policy: policy, Reason: reason}
}
