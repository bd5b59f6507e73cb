package egress

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// addrRange is a special-purpose address range and the words a reason uses for it.
type addrRange struct {
	prefix netip.Prefix
	what   string
}

// alwaysDeniedRanges lists the ranges no policy and no posture can allow, most specific
// first so that a reason names the metadata address rather than the link-local range
// around it. 0.0.0.0/8 ("this network") is denied whole, not just 0.0.0.0: Linux delivers
// 0.0.0.0 to the local host and nothing in the rest of the block is a legitimate
// destination.
var alwaysDeniedRanges = []addrRange{
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
	// Teredo (RFC 4380) hides the IPv4 address a relay delivers to, bit-inverted, behind
	// a Teredo server address and port of any value: no prefix list can tell the
	// metadata address from others in it, so the whole tunnel prefix is denied.
	{netip.MustParsePrefix("2001::/32"), "a Teredo tunnel address"},
}

// alwaysDenied is alwaysDeniedRanges followed by every IPv6 form that embeds one of its
// IPv4 ranges (see embeddings): 64:ff9b::a9fe:a9fe, 64:ff9b:1::a9fe:a9fe,
// 2002:a9fe:a9fe:: and ::169.254.169.254 reach the metadata service as surely as
// 169.254.169.254 does wherever a NAT64 gateway, a 6to4 relay or an automatic tunnel
// translates them; Teredo, whose embedding no prefix can express, is denied whole above. IPv4-mapped addresses (::ffff:a.b.c.d) need no entry: addresses are
// unmapped before they are judged.
var alwaysDenied = withEmbeddings(alwaysDeniedRanges, allEmbeddings)

// nonPublic lists the ranges the public posture denies besides the always-denied ones
// and Defaults.ClusterCIDRs: loopback, private, shared and special-purpose ranges that
// are not destinations on the public Internet (RFC 6890), and the IPv6 ranges that embed
// IPv4 addresses of any kind, whose IPv4 side the public posture cannot judge. The
// well-known NAT64 prefix is the exception: 64:ff9b::/96 is how an IPv6-only cluster
// reaches the public IPv4 Internet, so only the NAT64 forms of the IPv4 ranges below are
// denied, not the prefix.
var nonPublic = withEmbeddings([]addrRange{
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol assignment address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{localNAT64Prefix, "a local-use NAT64 address"},
	{sixToFourPrefix, "a 6to4 address"},
	{v4CompatPrefix, "an IPv4-compatible address"},
}, []embedding{nat64Embedding})

// Prefixes of the IPv6 ranges that embed IPv4 addresses.
var (
	// nat64Prefix is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a9fe:a9fe is
	// 169.254.169.254 behind a NAT64 gateway.
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	// localNAT64Prefix is the local-use NAT64 prefix (RFC 8215). An operator carves its
	// NAT64 prefix out of it with a length of 48, 56, 64 or 96 bits, and RFC 6052 places
	// the IPv4 address differently for each.
	localNAT64Prefix = netip.MustParsePrefix("64:ff9b:1::/48")
	// sixToFourPrefix is 6to4 (RFC 3056): 2002:a9fe:a9fe::/48 is the site behind
	// 169.254.169.254.
	sixToFourPrefix = netip.MustParsePrefix("2002::/16")
	// v4CompatPrefix holds the deprecated IPv4-compatible addresses ::a.b.c.d (RFC 4291),
	// which automatic tunnels deliver to a.b.c.d.
	v4CompatPrefix = netip.MustParsePrefix("::/96")
)

// embedding is one way of writing an IPv4 address inside an IPv6 address: the IPv6
// prefix, the byte positions the four IPv4 bytes go to (RFC 6052 skips byte 8, the "u"
// octet, which must be zero), and the words a reason uses for it.
type embedding struct {
	prefix netip.Prefix
	bytes  [4]int
	what   string
	// skipUnspecified leaves out 0.0.0.0/8 where reading it as embedded would catch
	// ordinary addresses: ::1 is no IPv4-compatible address, and every local-use NAT64
	// address read with a prefix length other than its operator's holds zero bytes
	// where the IPv4 address would be (64:ff9b:1::808:808, a /96 form, reads as 0.0.0.0
	// in the /48 form). No NAT64 gateway translates to 0.0.0.0/8.
	skipUnspecified bool
}

var (
	nat64Embedding = embedding{prefix: nat64Prefix, bytes: [4]int{12, 13, 14, 15}, what: "reached through NAT64"}
	// allEmbeddings are the forms an always-denied IPv4 range is denied in.
	allEmbeddings = []embedding{
		nat64Embedding,
		// Which prefix length the local NAT64 gateway uses is not known here, so an
		// address of 64:ff9b:1::/48 is read with each length RFC 6052 allows in it.
		{prefix: localNAT64Prefix, bytes: [4]int{6, 7, 9, 10}, what: "reached through local-use NAT64", skipUnspecified: true},    // /48
		{prefix: localNAT64Prefix, bytes: [4]int{7, 9, 10, 11}, what: "reached through local-use NAT64", skipUnspecified: true},   // /56
		{prefix: localNAT64Prefix, bytes: [4]int{9, 10, 11, 12}, what: "reached through local-use NAT64", skipUnspecified: true},  // /64
		{prefix: localNAT64Prefix, bytes: [4]int{12, 13, 14, 15}, what: "reached through local-use NAT64", skipUnspecified: true}, // /96
		{prefix: sixToFourPrefix, bytes: [4]int{2, 3, 4, 5}, what: "reached through 6to4"},
		{prefix: v4CompatPrefix, bytes: [4]int{12, 13, 14, 15}, what: "in IPv4-compatible form", skipUnspecified: true},
	}
	unspecified4 = netip.MustParsePrefix("0.0.0.0/8")
)

// embed returns the IPv6 prefix that holds exactly the addresses of the IPv4 prefix v4
// written in form e, with every byte e skips (the u octet) zero.
func (e embedding) embed(v4 netip.Prefix) netip.Prefix {
	a := e.prefix.Addr().As16()
	b := v4.Addr().As4()
	for i, pos := range e.bytes {
		a[pos] = b[i]
	}
	// The IPv4 prefix bits end in IPv4 byte (bits-1)/8; the IPv6 prefix must reach the
	// matching position, covering any skipped byte before it.
	bits := v4.Bits()
	if bits == 0 {
		return e.prefix
	}
	idx := (bits - 1) / 8 // the IPv4 byte the last prefix bit is in
	return netip.PrefixFrom(netip.AddrFrom16(a), e.bytes[idx]*8+(bits-8*idx)).Masked()
}

// withEmbeddings returns ranges followed by every form of each IPv4 range.
func withEmbeddings(ranges []addrRange, forms []embedding) []addrRange {
	out := slices.Clone(ranges)
	for _, e := range forms {
		for _, r := range ranges {
			if !r.prefix.Addr().Is4() || (e.skipUnspecified && unspecified4.Overlaps(r.prefix)) {
				continue
			}
			out = append(out, addrRange{e.embed(r.prefix), r.what + " " + e.what})
		}
	}
	return out
}

// AlwaysDenied reports whether addr lies in a range that no MCPEgressPolicy and no
// default posture can allow, and says why in words fit for a condition message: cloud
// metadata, link-local, unspecified, multicast and broadcast addresses, also in their
// IPv4-mapped, NAT64 (well-known and local-use), 6to4 and IPv4-compatible forms.
// ServerRules.DecideDial applies it first; the connector applies it to every dial
// whatever its decider says. The zero Addr is not denied.
func AlwaysDenied(addr netip.Addr) (reason string, denied bool) {
	if !addr.IsValid() {
		return "", false
	}
	addr = normalizeAddr(addr)
	rng, ok := lookup(alwaysDenied, addr)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s is %s, which is always denied", addr, rng.what), true
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
