package gateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/connector"
)

// A server of the session era asks its client for input (an elicitation) in the middle
// of a tools/call, on the session, and waits. A client of the sessionless era answers
// such questions with multi round-trip requests instead: the call's result says
// input_required, with the questions and an opaque requestState, and the client calls
// again with its answers and that state. The gateway bridges the two: the server's
// question ends the client's request as input_required, the call stays open upstream,
// and the client's retry answers the question and waits on for the result (or the next
// question).
//
// The open call lives on the replica that holds the upstream session, so the retry must
// reach that replica: a retry that reaches another one, or comes after inputWait, is told
// to call the tool again. Round trips with a server of the sessionless era need nothing
// of the sort: their requestState is the server's and passes through untouched.

// inputStatePrefix marks a requestState the gateway issued, as opposed to one of a
// sessionless server, which is passed on untouched.
const inputStatePrefix = "switchboard-input-"

// inputWait bounds how long a call waits for its client's answer.
const inputWait = 5 * time.Minute

// elicitationInputKey is the key of the one question a bridged input_required carries.
const elicitationInputKey = "elicitation"

// bridgedCall is a tools/call relayed to a server of the session era for a client that
// answers questions with multi round-trip requests.
type bridgedCall struct {
	key    connector.Key
	caller string // identity.Caller.Key
	tool   string
	// questions carries the server's elicitations to whichever request of the client
	// waits for the call; outcome its result.
	questions chan *question
	outcome   chan callOutcome
	cancel    context.CancelFunc
}

// question is one elicitation of the server waiting for the client's answer.
type question struct {
	params *mcp.ElicitParams
	answer chan *mcp.ElicitResult // nil answer: none will come
}

type callOutcome struct {
	res *mcp.CallToolResult
	err error
}

// openQuestion is a question the client was asked, by the requestState it was given.
type openQuestion struct {
	call     *bridgedCall
	question *question
	timer    *time.Timer
}

// inputBridge holds the bridged calls of one upstream client and the questions asked.
type inputBridge struct {
	mu    sync.Mutex
	calls map[*bridgedCall]struct{}
}

// openQuestions are the questions asked of clients on this replica, by requestState.
type openQuestions struct {
	mu sync.Mutex
	m  map[string]*openQuestion
}

// elicit is the upstream client's elicitation handler: the question goes to the one
// bridged call in flight. With none, or several (the session cannot say which call a
// question belongs to), the server is told no.
func (b *inputBridge) elicit(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	b.mu.Lock()
	var only *bridgedCall
	if len(b.calls) == 1 {
		for c := range b.calls {
			only = c
		}
	}
	n := len(b.calls)
	b.mu.Unlock()
	if only == nil {
		return nil, fmt.Errorf("the gateway cannot relay this elicitation: %d calls of this client are in flight and the session does not say which one asks", n)
	}
	q := &question{params: req.Params, answer: make(chan *mcp.ElicitResult, 1)}
	select {
	case only.questions <- q:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case a := <-q.answer:
		if a == nil {
			return nil, errors.New("the client did not answer the elicitation")
		}
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// takesInput reports whether the client of a sessionless request answers elicitations.
func takesInput(req mcp.Request) bool {
	ss, ok := req.GetSession().(*mcp.ServerSession)
	if !ok {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// bridgeTarget is where a bridged call goes: a session-era client session whose
// elicitations its bridge routes, for a caller's use of a server or a toolset (key) and
// the tool as the caller names it.
type bridgeTarget struct {
	key    connector.Key
	caller string // identity.Caller.Key
	tool   string
	bridge *inputBridge
	cs     *mcp.ClientSession
}

// callBridged starts a tools/call on a session-era client for a client that answers
// elicitations, and waits for its result or its first question.
func (g *Gateway) callBridged(ctx context.Context, t bridgeTarget, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	bc := &bridgedCall{key: t.key, caller: t.caller, tool: t.tool,
		questions: make(chan *question), outcome: make(chan callOutcome, 1), cancel: cancel}
	bridge := t.bridge
	bridge.mu.Lock()
	bridge.calls[bc] = struct{}{}
	bridge.mu.Unlock()
	go func() {
		res, err := t.cs.CallTool(callCtx, params)
		bridge.mu.Lock()
		delete(bridge.calls, bc)
		bridge.mu.Unlock()
		cancel()
		bc.outcome <- callOutcome{res: res, err: err}
	}()
	return g.awaitBridged(ctx, bc)
}

// resumeBridged answers the question a requestState names with the client's answer and
// waits on for the call's result or its next question.
func (g *Gateway) resumeBridged(ctx context.Context, t bridgeTarget, params *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	oq := g.openQuestions.take(params.RequestState)
	if oq == nil || oq.call.caller != t.caller || oq.call.key != t.key || oq.call.tool != t.tool {
		if oq != nil {
			// Not this caller's to answer: the question stays with its caller.
			g.openQuestions.put(params.RequestState, oq)
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestState names no open question of this call on this gateway replica " +
			"(it expired, or the round trip began on another replica): call the tool again"}
	}
	answer, _ := params.InputResponses[elicitationInputKey].(*mcp.ElicitResult)
	if answer == nil {
		g.openQuestions.put(params.RequestState, oq)
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses lack the answer to %q", elicitationInputKey)}
	}
	oq.timer.Stop()
	oq.question.answer <- answer
	return g.awaitBridged(ctx, oq.call)
}

// awaitBridged waits for the call's result, or for its next question, which it returns
// as input_required under a new requestState.
func (g *Gateway) awaitBridged(ctx context.Context, bc *bridgedCall) (*mcp.CallToolResult, error) {
	select {
	case out := <-bc.outcome:
		return out.res, out.err
	case q := <-bc.questions:
		state := inputStatePrefix + rand.Text()
		g.openQuestions.put(state, &openQuestion{call: bc, question: q})
		return inputRequired(q.params, state)
	case <-ctx.Done():
		// The client went away with the call open: nobody will see its result.
		bc.cancel()
		return nil, ctx.Err()
	}
}

// inputRequired is the input_required result that asks the client q under state,
// decoded by go-sdk from its wire form (go-sdk sets a result's type only as it decodes
// one).
func inputRequired(q *mcp.ElicitParams, state string) (*mcp.CallToolResult, error) {
	wire, err := json.Marshal(map[string]any{
		"resultType":    "input_required",
		"inputRequests": mcp.InputRequestMap{elicitationInputKey: q},
		"requestState":  state,
	})
	if err != nil {
		return nil, err
	}
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal(wire, res); err != nil {
		return nil, err
	}
	return res, nil
}

// put holds oq under state until it is taken or inputWait passes, when its call is told
// no answer will come.
func (o *openQuestions) put(state string, oq *openQuestion) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = make(map[string]*openQuestion)
	}
	if oq.timer == nil {
		oq.timer = time.AfterFunc(inputWait, func() {
			if expired := o.take(state); expired != nil {
				expired.question.answer <- nil
			}
		})
	}
	o.m[state] = oq
}

// take removes and returns the question state names, or nil.
func (o *openQuestions) take(state string) *openQuestion {
	if !strings.HasPrefix(state, inputStatePrefix) {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	oq := o.m[state]
	delete(o.m, state)
	return oq
}
