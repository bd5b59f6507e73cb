package egress

import (
	"cmp"
	"net/netip"
	"slices"
)

// addrRange is a special-purpose address range and the words a reason uses for it.
type addrRange struct {
	prefix netip.Prefix
	what   string
}

// alwaysDenied lists the ranges no policy and no posture can allow, most specific first
// so that a reason names the metadata address rather than the link-local range around it.
// 0.0.0.0/8 ("this network") is denied whole, not just 0.0.0.0: Linux delivers 0.0.0.0 to
// the local host and nothing in the rest of the block is a legitimate destination.
var alwaysDenied = withNAT64([]addrRange{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
})

// nonPublic lists the ranges the public posture denies besides the always-denied ones
// and Defaults.ClusterCIDRs.
var nonPublic = withNAT64([]addrRange{
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address"},
})

// nat64Prefix is the well-known NAT64 prefix (RFC 6052). In an IPv6-only cluster with
// DNS64, 64:ff9b::a9fe:a9fe reaches 169.254.169.254 through the NAT64 gateway, so every
// IPv4 range above is denied in its NAT64 form too.
var nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")

// withNAT64 returns ranges followed by the NAT64 form of each IPv4 range.
func withNAT64(ranges []addrRange) []addrRange {
	out := slices.Clone(ranges)
	for _, r := range ranges {
		if !r.prefix.Addr().Is4() {
			continue
		}
		a := nat64Prefix.Addr().As16()
		v4 := r.prefix.Addr().As4()
		copy(a[12:], v4[:])
		p := netip.PrefixFrom(netip.AddrFrom16(a), 96+r.prefix.Bits())
		out = append(out, addrRange{p, r.what + " reached through NAT64"})
	}
	return out
}

// lookup returns the first range of table that contains addr.
func lookup(table []addrRange, addr netip.Addr) (addrRange, bool) {
	for _, r := range table {
		if r.prefix.Contains(addr) {
			return r, true
		}
	}
	return addrRange{}, false
}

// prefixes returns the prefixes of table.
func prefixes(table []addrRange) []netip.Prefix {
	out := make([]netip.Prefix, len(table))
	for i, r := range table {
		out[i] = r.prefix
	}
	return out
}

// normalizeAddr drops the zone and unmaps an IPv4-mapped IPv6 address, so that
// ::ffff:169.254.169.254 is judged as 169.254.169.254.
func normalizeAddr(a netip.Addr) netip.Addr {
	return a.WithZone("").Unmap()
}

// normalizePrefix masks p and turns an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104)
// into its IPv4 form (10.0.0.0/8), matching how addresses are normalized.
func normalizePrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// carve returns the except list an ipBlock for cidr needs so that it admits none of
// denied: the given excepts plus every denied range inside cidr, sorted, with entries
// that lie inside another entry dropped. covered is true when a denied range contains all
// of cidr, in which case the block admits nothing and must not be rendered.
func carve(cidr netip.Prefix, excepts, denied []netip.Prefix) (out []netip.Prefix, covered bool) {
	out = slices.Clone(excepts)
	for _, d := range denied {
		switch {
		case d.Bits() <= cidr.Bits() && d.Contains(cidr.Addr()):
			return nil, true
		case cidr.Bits() <= d.Bits() && cidr.Contains(d.Addr()):
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	kept := out[:0]
	for _, p := range out {
		if n := len(kept); n > 0 && kept[n-1].Bits() <= p.Bits() && kept[n-1].Contains(p.Addr()) {
			continue
		}
		kept = append(kept, p)
	}
	return kept, false
}
