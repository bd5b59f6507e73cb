package connector

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A session whose server goes away while a session of a newer config connects (a stdio
// server's pod rolling: the old pod stops, the new one is being connected to) does not
// make the server unready: the newcomer's first connect settles what the server is.
func TestASessionFailingWhileItsReplacementConnectsIsNoNews(t *testing.T) {
	// The old version's address answers like the pod that replaced it: it never heard
	// of the session.
	var gone atomic.Bool
	oldHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil)
	old := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		oldHandler.ServeHTTP(w, r)
	}))
	release := make(chan struct{})
	var releaseOnce sync.Once
	open := func() { releaseOnce.Do(func() { close(release) }) }
	newer := serveStreamable(t, newServer(2, nil), nil)
	gated := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		newer.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(open) // before the servers' cleanup, which waits for their requests
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "rolling"}
	cfg := fastConfig(old.URL)
	cfg.ConnectTimeout = 10 * time.Second
	// Probed often, so that the old version going away is noticed at once.
	cfg.HealthCheck = HealthCheck{Interval: 50 * time.Millisecond, FailureThreshold: 1}
	p.Ensure(key, cfg)
	waitFor(t, p, key, "Ready on the first version", func(s Snapshot) bool { return s.State == StateReady })

	cfg.URL = gated.URL // the new version, which does not answer yet
	p.Ensure(key, cfg)
	gone.Store(true) // the old version goes away: its session ends and cannot start again
	testutil.Consistently(t, time.Second, "Ready while the new version connects", func() error {
		if s, _ := p.Snapshot(key); s.State != StateReady {
			return fmt.Errorf("state %s, last error %w", s.State, s.LastError)
		}
		return nil
	})

	open()
	waitFor(t, p, key, "Ready with the new version's tools", func(s Snapshot) bool {
		return s.State == StateReady && len(s.Tools) == 2
	})
}
