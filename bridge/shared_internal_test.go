package bridge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// SharedProcess exposes the shared-mode multiplexer to the package's external tests, which
// drive its virtual connections directly.
type SharedProcess struct{ p *sharedProcess }

// NewSharedProcess returns a multiplexer for opts, with the defaults New applies, that is
// closed when the test ends.
func NewSharedProcess(t testing.TB, opts Options) *SharedProcess {
	t.Helper()
	opts, err := opts.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	s := &SharedProcess{p: newSharedProcess(opts, opts.Logger)}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Connect returns the server side of a new client session.
func (s *SharedProcess) Connect(ctx context.Context, seq uint64) (mcp.Connection, error) {
	return s.p.connect(ctx, seq)
}

// PID returns the running process's PID, or 0.
func (s *SharedProcess) PID() int { return s.p.pid() }

// Close stops the process and ends every connection.
func (s *SharedProcess) Close() error { return s.p.close() }

// SharedQueueSize is how many messages a connection queues for a reader that does not keep up.
const SharedQueueSize = sharedQueueSize

func TestRestartDelayDoublesUpToTheCap(t *testing.T) {
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{3, 400 * time.Millisecond},
		{7, 6400 * time.Millisecond},
		{8, 10 * time.Second},
		{1000, 10 * time.Second},
	} {
		if got := restartDelay(tc.failures); got != tc.want {
			t.Errorf("restartDelay(%d) = %s, want %s", tc.failures, got, tc.want)
		}
	}
}

func TestSharedProtocolVersionStillUsesInitialize(t *testing.T) {
	v := sharedProtocolVersion()
	if v >= listenProtocol {
		t.Fatalf("sharedProtocolVersion() = %q, a protocol without initialize", v)
	}
	if v != mcp.SupportedProtocolVersions()[1] {
		t.Errorf("sharedProtocolVersion() = %q, want the newest go-sdk version below %s", v, listenProtocol)
	}
}

func TestProgressTokenIsRewrittenInPlace(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		wantToken    string // empty: no token
		want         string
	}{
		{"number", `{"name":"echo","_meta":{"progressToken":1,"other":"x"}}`, `1`,
			`{"_meta":{"other":"x","progressToken":42},"name":"echo"}`},
		{"string", `{"_meta":{"progressToken":"tok"}}`, `"tok"`, `{"_meta":{"progressToken":42}}`},
		{"none", `{"name":"echo"}`, ``, ``},
		{"null", `{"_meta":{"progressToken":null}}`, ``, ``},
		{"no params", ``, ``, ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, token := swapProgressToken(json.RawMessage(tc.params), json.RawMessage("42"))
			if string(token) != tc.wantToken {
				t.Fatalf("swapProgressToken(%s) replaced %s, want %s", tc.params, token, tc.wantToken)
			}
			if string(got) != tc.want {
				t.Errorf("rewritten params = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestResourceUpdatesReachSubscribersOfTheResourceOrAParent(t *testing.T) {
	c := &sharedConn{subs: map[string]struct{}{"file:///a": {}, "file:///dir/": {}}}
	for uri, want := range map[string]bool{
		"file:///a":          true,
		"file:///a/b":        true,
		"file:///ab":         false,
		"file:///dir/x":      true,
		"file:///dir":        false,
		"file:///other":      false,
		"demo://resource/1":  false,
		"file:///dir/deeper": true,
	} {
		if got := c.subscribedLocked(uri); got != want {
			t.Errorf("subscribed to %s = %v, want %v", uri, got, want)
		}
	}
}
