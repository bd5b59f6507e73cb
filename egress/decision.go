package egress

import (
	"net/netip"
	"net/url"
)

// Destination is where a connection is about to go.
type Destination struct {
	// Scheme is the URL scheme, "https" or "http".
	Scheme string
	// Host is the URL's host name, lower-cased and without port; it may be an IP literal.
	Host string
	// Addr is the resolved address being dialed. It is the zero Addr when the decision
	// is made before resolution (for example on a redirect target), in which case only
	// host rules and literal IP hosts can be judged.
	Addr netip.Addr
	// Port is the TCP port being dialed.
	Port uint16
}

// Redirect is one redirect hop a connection was asked to follow.
type Redirect struct {
	// From is the URL of the request that was answered with the redirect.
	From *url.URL
	// To is the redirect target.
	To *url.URL
	// Method is the HTTP method of the original request.
	Method string
	// StatusCode is the redirect status (301, 302, 303, 307 or 308).
	StatusCode int
	// Hop counts redirects followed so far for this request, starting at 1.
	Hop int
}

// Decision is the outcome of an egress or redirect check.
type Decision struct {
	// Allowed is true when the connection or hop may proceed.
	Allowed bool
	// Policy names the deciding MCPEgressPolicy as "namespace/name"; empty when the
	// manager's default posture or a built-in rule decided. When the rules of several
	// selecting policies deny together, it names the first of them by name and Reason
	// lists them.
	Policy string
	// Reason says why, in words fit for a status condition message. It never carries
	// a URL query string or a header value.
	Reason string
}
