package egress

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// hostPattern is a compiled host peer: an exact DNS name, or a wildcard that matches
// exactly one more label to the left of suffix.
type hostPattern struct {
	// name is the lower-case name without the "*." of a wildcard.
	name     string
	wildcard bool
}

// parseHostPattern compiles a host peer such as "api.example.com" or "*.example.com".
// Matching is case-insensitive, so the pattern is lower-cased first.
func parseHostPattern(s string) (hostPattern, error) {
	lower, ok := asciiLower(s)
	if !ok {
		return hostPattern{}, fmt.Errorf("host pattern %q is not ASCII", s)
	}
	p := hostPattern{name: lower}
	if rest, found := strings.CutPrefix(lower, "*."); found {
		p = hostPattern{name: rest, wildcard: true}
	}
	if msgs := validation.IsDNS1123Subdomain(p.name); len(msgs) > 0 {
		return hostPattern{}, fmt.Errorf("host pattern %q: %s", s, strings.Join(msgs, "; "))
	}
	for label := range strings.SplitSeq(p.name, ".") {
		if len(label) > validation.DNS1123LabelMaxLength {
			return hostPattern{}, fmt.Errorf("host pattern %q has a label longer than %d characters", s, validation.DNS1123LabelMaxLength)
		}
	}
	return p, nil
}

// matches reports whether host, a URL host name without port, matches the pattern. One
// trailing dot (the absolute form of a name) is ignored. A wildcard matches exactly one
// non-empty label: "*.example.com" matches "api.example.com" but neither "example.com"
// nor "a.b.example.com". Hosts with non-ASCII bytes never match: they are not the names
// the pattern speaks of, and Unicode case folding would make "\u212a" (Kelvin) equal "k".
func (p hostPattern) matches(host string) bool {
	host, ok := asciiLower(strings.TrimSuffix(host, "."))
	if !ok {
		return false
	}
	if !p.wildcard {
		return host == p.name
	}
	label, found := strings.CutSuffix(host, "."+p.name)
	return found && label != "" && !strings.Contains(label, ".")
}

// String returns the pattern as written in a policy, lower-cased.
func (p hostPattern) String() string {
	if p.wildcard {
		return "*." + p.name
	}
	return p.name
}

// asciiLower lower-cases the ASCII letters of s. It reports false when s holds a byte
// outside ASCII, which no DNS name the policies allow can contain.
func asciiLower(s string) (string, bool) {
	hasUpper := false
	for i := range len(s) {
		c := s[i]
		if c >= 0x80 {
			return "", false
		}
		hasUpper = hasUpper || ('A' <= c && c <= 'Z')
	}
	if !hasUpper {
		return s, true
	}
	return strings.ToLower(s), true
}

// sameHost compares two URL host names ASCII-case-insensitively and exactly otherwise.
// strings.EqualFold would fold Unicode too, letting a name that resolves elsewhere pass
// as the same host.
func sameHost(a, b string) bool {
	la, okA := asciiLower(a)
	lb, okB := asciiLower(b)
	if okA && okB {
		return la == lb
	}
	return a == b
}
