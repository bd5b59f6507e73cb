package connector

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A server another replica owns costs this replica no connection until its gateway
// needs one: the first upstream starts the session and works, and the session stops
// again once no upstream has used it for the linger.
func TestAStandbyServerConnectsOnlyForTheGateway(t *testing.T) {
	var log headerLog
	srv := startServer(t, log.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(2, nil) }, nil)))
	p := testPool(t, func(o *Options) { o.StandbyLinger = 100 * time.Millisecond })
	key := Key{Namespace: "ns", Name: "owned-elsewhere"}

	p.Standby(key, fastConfig(srv.URL))
	time.Sleep(200 * time.Millisecond) // a session, had one started, would have connected by now
	if n := log.count(); n != 0 {
		t.Fatalf("a standby server got %d requests before the gateway needed it", n)
	}

	u := openUpstream(t, p, key)
	call := &jsonrpc.Request{ID: mustID(t, float64(2)), Method: "tools/list", Params: json.RawMessage(`{}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("tools/list through a standby server's upstream: %v", resp.Error)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}

	// Once parked, the pool's own session has ended it with a DELETE and sends nothing more.
	testutil.Eventually(t, waitTimeout, "the standby session parked", func() error {
		if snap, _ := p.Snapshot(key); snap.State != StateConnecting {
			return fmt.Errorf("state %s, want the unstarted session's Connecting", snap.State)
		}
		return nil
	})
	time.Sleep(200 * time.Millisecond)
	settledCount := log.count()
	time.Sleep(300 * time.Millisecond)
	if n := log.count(); n != settledCount {
		t.Errorf("a parked standby server got %d more requests", n-settledCount)
	}
}

// Taking a standby server over (Ensure with the same config) starts its session.
func TestEnsureTakesAStandbyServerOver(t *testing.T) {
	srv := serveStreamable(t, newServer(3, nil), nil)
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "taken-over"}
	p.Standby(key, fastConfig(srv.URL))
	p.Ensure(key, fastConfig(srv.URL))
	if snap := waitReady(t, p, key); len(snap.Tools) != 3 {
		t.Errorf("tools after the takeover: %v", toolNames(snap))
	}
}

// A server this replica owned and hands over stops its session, unless the gateway is
// using it: an agent's live session is not cut by a rebalance.
func TestStandbyStopsAnOwnedSessionOnlyWhenTheGatewayIsNotUsingIt(t *testing.T) {
	srv := serveStreamable(t, newServer(1, nil), nil)
	p := testPool(t, func(o *Options) { o.StandbyLinger = time.Hour })
	idle, used := Key{Namespace: "ns", Name: "idle"}, Key{Namespace: "ns", Name: "used"}
	for _, k := range []Key{idle, used} {
		p.Ensure(k, fastConfig(srv.URL))
		waitReady(t, p, k)
	}
	u := openUpstream(t, p, used)

	p.Standby(idle, fastConfig(srv.URL))
	p.Standby(used, fastConfig(srv.URL))
	if snap, _ := p.Snapshot(idle); snap.State != StateConnecting {
		t.Errorf("the unused handed-over session is %s; want it stopped (an unstarted session reads Connecting)", snap.State)
	}
	if snap, _ := p.Snapshot(used); snap.State != StateReady {
		t.Errorf("the handed-over session the gateway uses is %s; want it still Ready", snap.State)
	}
	call := &jsonrpc.Request{ID: mustID(t, float64(3)), Method: "tools/list", Params: json.RawMessage(`{}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatalf("the agent's upstream after the handover: %v", err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("tools/list after the handover: %v", resp.Error)
	}
}
