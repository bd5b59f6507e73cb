package gateway_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/gateway"
)

// A caller that only listens learns that it lost use of a server within the access TTL:
// its session ends, though it sends no request that would be refused.
func TestARevokedCallerThatOnlyListensIsCutOff(t *testing.T) {
	var allowed atomic.Pointer[map[string][]string]
	allowed.Store(&map[string][]string{"agent": {"mcpservers/notes"}})
	sar := toolsetGrantsFrom(&allowed)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "agent"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
		o.AccessTTL = 200 * time.Millisecond
	}})
	// The go-sdk client opens its standalone stream after initialize and sends nothing
	// more.
	cs := h.connect(&mcp.ClientOptions{})
	ended := make(chan struct{})
	go func() {
		_ = cs.Wait() // the session's end, whatever the client makes of it
		close(ended)
	}()

	allowed.Store(&map[string][]string{})
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the session of a caller that lost use of the server still stands 10s later")
	}
	if lines := h.audit.matching("Session ended", "may no longer use"); len(lines) != 1 {
		t.Errorf("audit lines of the revoked session's end: %q; want one", lines)
	}
}

// A toolset session ends the same way when its caller loses use of the toolset.
func TestARevokedToolsetCallerIsCutOff(t *testing.T) {
	var grants atomic.Pointer[map[string][]string]
	grants.Store(&map[string][]string{"agent": {"mcptoolsets/support-agent", "mcpservers/notes"}})
	sar := toolsetGrantsFrom(&grants)
	h := newToolsetHarness(t, func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "agent"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
		o.AccessTTL = 200 * time.Millisecond
	})
	cs, err := h.connect(callerToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		_ = cs.Wait() // the session's end, whatever the client makes of it
		close(ended)
	}()
	grants.Store(&map[string][]string{"agent": {"mcpservers/notes"}})
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the toolset session of a caller that lost use of the toolset still stands 10s later")
	}
}
