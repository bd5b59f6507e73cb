package oauth

import (
	"net/netip"
	"net/url"
	"strings"
)

// CanonicalResource is the server's canonical URI (MCP authorization, RFC 8707): lower
// case scheme and host, no default port, no query, no fragment, no trailing slash.
func CanonicalResource(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	defaultPort := (scheme == "https" && u.Port() == "443") || (scheme == "http" && u.Port() == "80")
	if port := u.Port(); port != "" && !defaultPort {
		host += ":" + port
	}
	return scheme + "://" + host + strings.TrimRight(u.EscapedPath(), "/")
}

// parseCanonical returns the canonical form of a resource URL from metadata.
func parseCanonical(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", false
	}
	return CanonicalResource(u), true
}

// SameIssuer reports whether two issuer identifiers name the same authorization server:
// equal but for a trailing slash (RFC 8414 compares issuers as strings; servers differ
// in whether they print the slash of an issuer without a path).
func SameIssuer(a, b string) bool {
	return a != "" && strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

// BoundedScopes keeps at most 32 well-formed scopes (or other metadata words).
func BoundedScopes(in []string) []string {
	var out []string
	for _, s := range in {
		if len(out) == 32 {
			break
		}
		if s != "" && len(s) <= 256 && !strings.ContainsAny(s, " \"\\\t\r\n") {
			out = append(out, s)
		}
	}
	return out
}

// NamesLoopback reports whether host names a loopback address by itself: a loopback IP
// literal, or localhost (RFC 6761). A name is not resolved to find out: the dial would
// resolve it again, and a name that resolved to loopback here could resolve elsewhere
// then (DNS rebinding), with a credential sent in the clear.
func NamesLoopback(host string) bool {
	if addr, err := netip.ParseAddr(host); err == nil {
		return addr.Unmap().IsLoopback()
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
