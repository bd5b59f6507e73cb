package connector

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/switchboard-mcp/switchboard/egress"
)

// allowEverything is a decider that allows every dial and hop, standing in for a buggy
// or permissive one.
type allowEverything struct{}

func (allowEverything) DecideDial(egress.Destination) egress.Decision {
	return egress.Decision{Allowed: true, Reason: "allowed"}
}

func (allowEverything) DecideRedirect(egress.Redirect) egress.Decision {
	return egress.Decision{Allowed: true, Reason: "allowed"}
}

// TestDialerDeniesWhatEgressAlwaysDenies is issue 13, item 4: the dialer applies the
// egress package's always-denied ranges, embedded forms included, whatever its decider
// says; the connector's own copy of the list lacked the NAT64, 6to4, IPv4-compatible,
// 0.0.0.0/8 and broadcast forms. It judges without dialing, so that a regression never
// sends a packet to these addresses.
func TestDialerDeniesWhatEgressAlwaysDenies(t *testing.T) {
	endpoint, _ := url.Parse("http://mcp.example.test:8080/mcp")
	for name, decider := range map[string]EgressDecider{"permissive decider": allowEverything{}, "default decider": nil} {
		cfg := fastConfig(endpoint.String())
		cfg.Egress = decider
		stack, err := newHTTPStack(cfg.withDefaults(), endpoint)
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{
			"64:ff9b::a9fe:a9fe",     // metadata through NAT64
			"64:ff9b:1::a9fe:a9fe",   // metadata through local-use NAT64
			"2002:a9fe:a9fe::1",      // metadata through 6to4
			"::169.254.169.254",      // metadata, IPv4-compatible
			"::ffff:169.254.169.254", // metadata, IPv4-mapped
			"0.1.2.3",                // this network
			"255.255.255.255",        // broadcast
			"169.254.169.254",
			"fe80::1",
		} {
			dest := egress.Destination{Scheme: "http", Host: "mcp.example.test", Addr: netip.MustParseAddr(addr), Port: 8080}
			e := stack.judgeDial(dest)
			if e == nil || e.Reason != ReasonEgressDenied || !strings.Contains(e.Message, "always denied") {
				t.Errorf("%s: dial to %s: got %v, want EgressDenied naming it always denied", name, addr, e)
			}
		}
		for _, addr := range []string{"127.0.0.1", "::1", "10.0.0.1", "64:ff9b::808:808"} {
			dest := egress.Destination{Scheme: "http", Host: "mcp.example.test", Addr: netip.MustParseAddr(addr), Port: 8080}
			if e := stack.judgeDial(dest); e != nil {
				t.Errorf("%s: dial to %s denied: %v", name, addr, e)
			}
		}
	}
}
