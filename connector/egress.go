package connector

import (
	"net/netip"

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
// redirect at all and denies link-local, cloud metadata, unspecified and multicast
// addresses; everything else, loopback included, is allowed.
func DefaultEgressDecider() EgressDecider { return defaultDecider{} }

type defaultDecider struct{}

// metadataAddrs are cloud instance metadata services outside the link-local ranges.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack (also link-local)
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

func (defaultDecider) DecideDial(d egress.Destination) egress.Decision {
	if reason := builtinDenial(d.Addr); reason != "" {
		return egress.Decision{Reason: reason}
	}
	return egress.Decision{Allowed: true}
}

func (defaultDecider) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Reason: "redirects are not followed unless an egress policy allows them"}
}

// builtinDenial returns why addr may never be dialed, or "" when nothing built in
// forbids it. The zero Addr (not yet resolved) is not judged here.
func builtinDenial(addr netip.Addr) string {
	if !addr.IsValid() {
		return ""
	}
	addr = addr.Unmap()
	for _, m := range metadataAddrs {
		if addr == m {
			return "address " + addr.String() + " is a cloud metadata service"
		}
	}
	switch {
	case addr.IsLinkLocalUnicast():
		return "address " + addr.String() + " is link-local"
	case addr.IsUnspecified():
		return "address " + addr.String() + " is unspecified"
	case addr.IsMulticast():
		return "address " + addr.String() + " is multicast"
	}
	return ""
}
