package connector

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// newHeavyServer returns a go-sdk server with 40 resources whose URIs are 8 KiB each:
// a snapshot of it keeps about 330 KiB.
func newHeavyServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "heavy", Version: "1"}, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	addTool(s, "tool-000")
	for i := range 40 {
		s.AddResource(&mcp.Resource{URI: fmt.Sprintf("test://heavy/%04d/%s", i, strings.Repeat("u", 8<<10)), Name: fmt.Sprint("r", i)}, nil)
	}
	return s
}

func TestDiscoveryMemoryBudgetPerNamespace(t *testing.T) {
	// A 2 MiB budget: 512 KiB a namespace, room for one heavy server.
	p := testPool(t, func(o *Options) {
		o.DiscoveryMemoryBudget = 2 << 20
		o.InitialBackoff, o.MaxBackoff = 200*time.Millisecond, 500*time.Millisecond
	})
	config := func(s *mcp.Server) Config {
		cfg := fastConfig(serveStreamable(t, s, nil).URL)
		cfg.Timeout = 10 * time.Second
		return cfg
	}
	first := newHeavyServer()
	a, b := Key{"tenant-a", "heavy-1"}, Key{"tenant-a", "heavy-2"}
	other := Key{"tenant-b", "heavy"}
	p.Ensure(a, config(first))
	waitReady(t, p, a)

	// A second heavy server breaks tenant-a's share and fails, naming the budget.
	p.Ensure(b, config(newHeavyServer()))
	snap := waitDown(t, p, b, ReasonLimitExceeded)
	if msg := snap.LastError.Message; !strings.Contains(msg, "discovery memory budget") || !strings.Contains(msg, "tenant-a") {
		t.Errorf("message %q does not name the namespace's budget", msg)
	}

	// Another namespace has a share of its own.
	p.Ensure(other, config(newHeavyServer()))
	waitReady(t, p, other)

	// Rediscoveries replace what the first server keeps rather than adding to it.
	for i := range 3 {
		addTool(first, fmt.Sprintf("tool-new-%d", i))
		snap := waitFor(t, p, a, "rediscovered tools", func(s Snapshot) bool { return len(s.Tools) == 2+i })
		if snap.State != StateReady || snap.LastError != nil {
			t.Fatalf("rediscovery %d: state %s, error %v", i+1, snap.State, snap.LastError)
		}
	}

	// Removing the first server frees its share: the second one's retry gets in.
	p.Remove(a)
	waitReady(t, p, b)
}

func TestMemoryBudgetShares(t *testing.T) {
	b := newMemoryBudget(400) // 100 a namespace
	grow := func(l *lease, n int64) *Error {
		_, e := l.grow(0, n)
		return e
	}
	a, a2 := b.lease("ns1"), b.lease("ns1")
	if e := grow(a, 80); e != nil {
		t.Fatal(e)
	}
	a.commit()
	if e := grow(a2, 30); e == nil || !strings.Contains(e.Message, "namespace ns1 would keep more than its share of 100 bytes") {
		t.Errorf("second lease of ns1: %v, want the namespace share named", e)
	}
	a2.abort()

	// A rediscovery reuses what the published lists hold: 90 bytes replace 80.
	if e := grow(a, 90); e != nil {
		t.Errorf("rediscovery of 90 bytes replacing 80: %v", e)
	}
	a.commit()

	// Other namespaces have shares of their own, up to the manager-wide limit.
	for _, ns := range []string{"ns2", "ns3", "ns4"} {
		if e := grow(b.lease(ns), 100); e != nil {
			t.Fatalf("%s: %v", ns, e)
		}
	}
	if e := grow(b.lease("ns5"), 20); e == nil || !strings.Contains(e.Message, "manager would keep more than --discovery-memory-budget 400 bytes") {
		t.Errorf("ns5 over the manager-wide budget: %v", e)
	}

	// Closing a lease (a server removed) frees its bytes for the namespace.
	a.close()
	if e := grow(a2, 100); e != nil {
		t.Errorf("ns1 after its first server left: %v", e)
	}

	// A page of a namespace its kept bytes fill fails at once.
	if _, e := b.hold(context.Background(), "ns1", 10); e == nil {
		t.Error("a page of a full namespace was admitted")
	}

	// A page waits while other pages fill the share, until its context is done, and
	// gets in once they are released.
	pages := newMemoryBudget(400)
	first, e := pages.hold(context.Background(), "ns", 100)
	if e != nil || first != 100 {
		t.Fatalf("first page: %d, %v", first, e)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, e := pages.hold(done, "ns", 10); e == nil {
		t.Error("a page got in while another filled the namespace share")
	}
	pages.release("ns", 0, first)
	if _, e := pages.hold(done, "ns", 10); e != nil {
		t.Errorf("page after the first was released: %v", e)
	}
}
