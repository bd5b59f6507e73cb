package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
)

// methodListen is the sessionless era's request for a stream of notifications, which
// stays open until its client closes it.
const methodListen = "subscriptions/listen"

// sharesRetryAfter is the Retry-After, in seconds, of a request refused for a share held:
// streams close and calls end at any moment.
const sharesRetryAfter = 1

// shares counts what callers hold on this replica at once, each caller and all of them
// together: the listen streams open, or the sessionless requests being served.
type shares struct {
	mu       sync.Mutex
	total    int
	byCaller map[string]int // by identity.Caller.Key
}

// take counts one more for the caller unless it holds perCaller already (429) or all
// callers together hold total (503; total 0 bounds none), and returns 0 or that status.
func (s *shares) take(caller string, perCaller, total int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byCaller[caller] >= perCaller:
		return http.StatusTooManyRequests
	case total > 0 && s.total >= total:
		return http.StatusServiceUnavailable
	}
	if s.byCaller == nil {
		s.byCaller = make(map[string]int)
	}
	s.byCaller[caller]++
	s.total++
	return 0
}

// give gives back one the caller took.
func (s *shares) give(caller string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	decrement(s.byCaller, caller)
}

// admitSessionless bounds what one sessionless request of an authorized caller holds
// while it is served, a server's or a toolset's, judged on msg, the front door's strict
// decoding of the request (the one message go-sdk then reads): a subscriptions/listen
// stream is one of the caller's listen streams (--gateway-max-listen-streams-per-caller,
// beyond it 429) and of the replica's (--gateway-max-listen-streams, 503); any other
// request is one of the caller's requests in flight (--gateway-max-inflight-per-caller,
// 429). A request beyond them is answered with a JSON-RPC error and Retry-After and
// admitSessionless returns false; otherwise the caller calls release once the request
// is answered (a stream closed).
func (g *Gateway) admitSessionless(w http.ResponseWriter, caller *identity.Caller, msg *mcpmsg.Message) (release func(), ok bool) {
	if msg.Method != methodListen {
		if g.inflight.take(caller.Key, g.opts.MaxInflightPerCaller, 0) != 0 {
			g.refuseShare(w, msg.ID, http.StatusTooManyRequests, fmt.Sprintf(
				"%s has its maximum of %d sessionless requests in flight on this replica (--gateway-max-inflight-per-caller); retry once one is answered",
				caller.Username, g.opts.MaxInflightPerCaller))
			return nil, false
		}
		return func() { g.inflight.give(caller.Key) }, true
	}
	switch status := g.listens.take(caller.Key, g.opts.MaxListenStreamsPerCaller, g.opts.MaxListenStreams); status {
	case http.StatusTooManyRequests:
		g.refuseShare(w, msg.ID, status, fmt.Sprintf(
			"%s holds its maximum of %d subscriptions/listen streams on this replica (--gateway-max-listen-streams-per-caller); close one or retry later",
			caller.Username, g.opts.MaxListenStreamsPerCaller))
		return nil, false
	case http.StatusServiceUnavailable:
		g.refuseShare(w, msg.ID, status, fmt.Sprintf(
			"the gateway holds its maximum of %d subscriptions/listen streams (--gateway-max-listen-streams); retry later", g.opts.MaxListenStreams))
		return nil, false
	}
	g.metrics.listens.Inc()
	return func() {
		g.listens.give(caller.Key)
		g.metrics.listens.Dec()
	}, true
}

// refuseShare answers a sessionless request beyond a share with status, Retry-After and a
// JSON-RPC error saying why, and counts the refusal.
func (g *Gateway) refuseShare(w http.ResponseWriter, id jsonrpc.ID, status int, why string) {
	g.metrics.refused.WithLabelValues(strconv.Itoa(status)).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(sharesRetryAfter))
	mcphttp.WriteError(w, status, id, codeUnavailable, why)
}
