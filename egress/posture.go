package egress

import (
	"fmt"
	"net/netip"
)

// DefaultPosture is the egress a server gets when no MCPEgressPolicy selects it. The
// manager's --default-egress flag sets it.
type DefaultPosture string

const (
	// PosturePublic allows public addresses only: loopback, private (RFC 1918), CGNAT
	// (100.64.0.0/10), IETF protocol assignments (192.0.0.0/24), benchmarking
	// (198.18.0.0/15), reserved (240.0.0.0/4), unique local (fc00::/7), site-local
	// (fec0::/10), the IPv6 ranges that embed IPv4 addresses (local-use NAT64
	// 64:ff9b:1::/48, 6to4 2002::/16, IPv4-compatible ::/96, and the well-known NAT64
	// forms of the IPv4 ranges listed) and the cluster's own ranges are denied. It is
	// the default.
	PosturePublic DefaultPosture = "public"
	// PostureAll allows every address except the always-denied ones.
	PostureAll DefaultPosture = "all"
	// PostureNone denies all egress.
	PostureNone DefaultPosture = "none"
)

// ParseDefaultPosture parses the value of the --default-egress flag: "public", "all" or
// "none". The empty string is PosturePublic.
func ParseDefaultPosture(s string) (DefaultPosture, error) {
	switch p := DefaultPosture(s); p {
	case "":
		return PosturePublic, nil
	case PosturePublic, PostureAll, PostureNone:
		return p, nil
	default:
		return "", fmt.Errorf("unknown default egress posture %q: want public, all or none", s)
	}
}

// String returns the posture's flag value.
func (p DefaultPosture) String() string { return string(p) }

// Defaults is the manager-wide egress configuration that applies to servers no policy
// selects. The zero value is the public posture with no cluster ranges.
type Defaults struct {
	// Posture is the default posture; empty means PosturePublic.
	Posture DefaultPosture
	// ClusterCIDRs are ranges the public posture denies in addition to the built-in
	// non-public ones, typically the cluster's Service and Pod CIDRs. They do not limit
	// what a policy allows, and the all posture does not deny them.
	ClusterCIDRs []netip.Prefix
}

// Validate reports a posture or a cluster CIDR that Compile cannot use. The manager calls
// it once at start-up; Compile itself treats an unknown posture as PostureNone and skips
// invalid prefixes.
func (d Defaults) Validate() error {
	if _, err := ParseDefaultPosture(string(d.Posture)); err != nil {
		return err
	}
	for i, p := range d.ClusterCIDRs {
		if !p.IsValid() {
			return fmt.Errorf("cluster CIDR %d is not a valid prefix", i)
		}
	}
	return nil
}

// posture returns the effective posture, failing closed on an unknown value.
func (d Defaults) posture() DefaultPosture {
	p, err := ParseDefaultPosture(string(d.Posture))
	if err != nil {
		return PostureNone
	}
	return p
}
