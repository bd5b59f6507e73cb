package bridge

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
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

func TestSessionCallsGetARandomProgressTokenOfTheProcess(t *testing.T) {
	for _, tc := range []struct {
		name, params string
		wantToken    string // the session's token; empty: none
		metaMembers  int    // in the _meta sent on, with a token
		wantErr      bool
	}{
		{"number", `{"name":"echo","_meta":{"progressToken":1,"other":"x"}}`, `1`, 2, false},
		{"string", `{"_meta":{"progressToken":"tok"}}`, `"tok"`, 1, false},
		{"escaped name", `{"_meta":{"progress\u0054oken":7}}`, `7`, 1, false},
		{"escaped _meta", `{"_m\u0065ta":{"progressToken":7}}`, `7`, 1, false},
		{"none", `{"name":"echo"}`, ``, 0, false},
		{"null", `{"_meta":{"progressToken":null}}`, ``, 0, false},
		{"no params", ``, ``, 0, false},
		{"token in another case", `{"_meta":{"ProgressToken":7}}`, ``, 0, true},
		{"_meta in another case", `{"_META":{"progressToken":7}}`, ``, 0, true},
		{"duplicate token", `{"_meta":{"progressToken":1,"progress\u0054oken":7}}`, ``, 0, true},
		{"not an object", `[1]`, ``, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &jsonrpc.Request{ID: testutil.ID(t, float64(1)), Method: "tools/call", Params: json.RawMessage(tc.params)}
			out, call, err := newSessionCall(req)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("params %s were accepted, want an error", tc.params)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(call.origToken) != tc.wantToken {
				t.Fatalf("the session's token = %s, want %s", call.origToken, tc.wantToken)
			}
			if tc.wantToken == "" {
				if call.token.IsValid() || string(out.Params) != tc.params {
					t.Errorf("params without a token became %s (token %v)", out.Params, call.token.Raw())
				}
				return
			}
			var sent struct {
				Meta map[string]any `json:"_meta"`
			}
			if err := json.Unmarshal(out.Params, &sent); err != nil {
				t.Fatal(err)
			}
			if got := sent.Meta["progressToken"]; got != call.token.Raw() || len(sent.Meta) != tc.metaMembers {
				t.Errorf("sent params %s, want the session's _meta with progressToken %v", out.Params, call.token.Raw())
			}
		})
	}
}

func TestProcessIDsAreRandomAndShort(t *testing.T) {
	seen := make(map[jsonrpc.ID]bool)
	for range 1000 {
		id := newProcessID()
		s, ok := id.Raw().(string)
		if !ok || len(s) != 16 {
			t.Fatalf("process ID %v, want a string of 16 characters", id.Raw())
		}
		if seen[id] {
			t.Fatalf("process ID %s drawn twice", s)
		}
		seen[id] = true
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
