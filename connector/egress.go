package connector

import (
	"github.com/switchboard-mcp/switchboard/egress"
)

// EgressDecider decides where a session's connections may go. The connector asks it in
// the dialer, with the resolved address actually being dialed (so DNS rebinding cannot
// slip through), and on every redirect hop. Implementations must be safe for concurrent
// use and must not block: they are called on the connection path.
type EgressDecider interface {
	// DecideDial judges a TCP connection about to be opened.
	DecideDial(egress.Destination) egress.Decision
	// DecideRedirect judges one redirect hop.
	DecideRedirect(egress.Redirect) egress.Decision
}

// DefaultEgressDecider returns the decider used when a Config has none: it follows no
// redirect at all and denies what the egress package always denies (link-local, cloud
// metadata, unspecified, multicast and broadcast addresses, also in their IPv4-mapped,
// NAT64, 6to4 and IPv4-compatible forms; see [egress.AlwaysDenied]); everything else,
// loopback included, is allowed.
func DefaultEgressDecider() EgressDecider { return defaultDecider{} }

type defaultDecider struct{}

func (defaultDecider) DecideDial(d egress.Destination) egress.Decision {
	if reason, denied := egress.AlwaysDenied(d.Addr); denied {
		return egress.Decision{Reason: reason}
	}
	return egress.Decision{Allowed: true}
}

func (defaultDecider) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Reason: "redirects are not followed unless an egress policy allows them"}
}
