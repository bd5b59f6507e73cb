package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/policy"
)

// A client of the sessionless era (2026-07-28) has no session the gateway could ask on
// in the middle of a call. It is asked for an approval as a sessionless server asks for
// any input: the call's first request is answered input_required, with one form
// elicitation that shows the call and a requestState, and the client calls again with
// its user's answer and that state. Nothing of the round trip is kept in memory beyond
// the spent states below: the state carries what the gateway needs, integrity-protected.
//
// The state is an HMAC-SHA256, under the gateway's approval key (Options.ApprovalKey, or
// a key of this process), over when it expires, a random nonce, and what it approves:
// the caller (identity.Caller.Key), the endpoint (the server, and the toolset it is
// reached through), the tool as the client names it, a SHA-256 of the exact argument
// bytes as forwarded, and the policy and rule that asked. So an answer approves one
// call only: other arguments, another tool, endpoint or caller, a policy since changed,
// or a state altered in any bit does not verify; nor does one older than approvalTTL.
// Each state approves once on a replica (approvals.spent). A replica with another key
// cannot verify the state and says so; the client calls again and is asked anew.

// approvalStatePrefix marks a requestState the gateway issued with an approval request;
// it is the gateway's own and never reaches a server.
const approvalStatePrefix = "switchboard-approval-"

// approvalInputKey is the key of the approval question in inputRequests and of its answer
// in inputResponses.
const approvalInputKey = "switchboard.approval"

// approvalTTL is how long an approval request holds: its user has that long to answer.
const approvalTTL = 5 * time.Minute

// maxSpentApprovals bounds the approvals a replica remembers as used (each for at most
// approvalTTL).
const maxSpentApprovals = 1 << 16

// approvalKeySize is the size of the key the gateway makes itself, and the least it
// accepts (Options.ApprovalKey).
const approvalKeySize = 32

const (
	approvalStateVersion = 1
	approvalNonceSize    = 16
	// approvalStateSize is the decoded state: version, expiry, nonce, MAC.
	approvalStateSize = 1 + 8 + approvalNonceSize + sha256.Size
)

// approvals issues and verifies the requestStates of approval requests.
type approvals struct {
	key []byte

	mu sync.Mutex
	// spent are the nonces of the states that approved (or were declined) on this
	// replica, until they expire.
	spent map[[approvalNonceSize]byte]time.Time
	now   func() time.Time
}

// newApprovals returns the approvals of a gateway whose key is key, or a random key of
// this process when key is empty.
func newApprovals(key []byte) (*approvals, error) {
	if len(key) == 0 {
		key = make([]byte, approvalKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
	} else if len(key) < approvalKeySize {
		return nil, fmt.Errorf("gateway: the approval key must be at least %d bytes", approvalKeySize)
	}
	return &approvals{key: key, spent: map[[approvalNonceSize]byte]time.Time{}, now: time.Now}, nil
}

// approvalSubject is what one approval approves.
type approvalSubject struct {
	caller  string // identity.Caller.Key
	server  string // namespace/name
	toolset string // namespace/name; "" at the server's own endpoint
	tool    string // as the client names it
	args    [sha256.Size]byte
	policy  string
	rule    int
}

// subjectOf is what q, a request v requires approval for, would be approved as.
func subjectOf(q *query, v policy.Verdict) approvalSubject {
	s := approvalSubject{caller: q.caller.Key, server: q.server.String(), tool: q.nameAsked(),
		args: sha256.Sum256(q.arguments), policy: v.Policy, rule: v.Rule}
	if q.toolset != nil {
		s.toolset = q.toolset.String()
	}
	return s
}

// mac is the MAC of a state's head (version, expiry, nonce) for s.
func (a *approvals) mac(head []byte, s approvalSubject) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("switchboard approval\x00"))
	m.Write(head)
	for _, field := range []string{s.caller, s.server, s.toolset, s.tool, string(s.args[:]), s.policy, strconv.Itoa(s.rule)} {
		writeField(m, field)
	}
	return m.Sum(nil)
}

// writeField writes one length-prefixed field, so that no two subjects write the same
// bytes.
func writeField(h hash.Hash, field string) {
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(field)))])
	h.Write([]byte(field))
}

// issue returns a new requestState that approves s until approvalTTL from now.
func (a *approvals) issue(s approvalSubject) (string, error) {
	head := make([]byte, 1+8+approvalNonceSize, approvalStateSize)
	head[0] = approvalStateVersion
	binary.BigEndian.PutUint64(head[1:9], uint64(a.now().Add(approvalTTL).Unix())) //nolint:gosec // a time after 1970
	if _, err := rand.Read(head[9:]); err != nil {
		return "", err
	}
	head = append(head, a.mac(head, s)...)
	return approvalStatePrefix + base64.RawURLEncoding.EncodeToString(head), nil
}

// Why an approval's requestState does not approve a call: the agent can show these, and
// each ends in what to do.
var (
	errApprovalUnverified = errors.New("the approval's requestState does not verify on this gateway replica: it was altered, " +
		"it answers another call (another caller, tool, arguments or policy rule), or another replica issued it; call the tool again to be asked anew")
	errApprovalExpired = fmt.Errorf("the approval expired (an approval request holds %s); call the tool again to be asked anew", approvalTTL)
	errApprovalSpent   = errors.New("this approval was used already; call the tool again to be asked anew")
	errApprovalFull    = fmt.Errorf("this gateway replica holds its maximum of %d recent approvals; retry later", maxSpentApprovals)
)

// redeem verifies that state approves s, now, for the first time, and spends it.
func (a *approvals) redeem(state string, s approvalSubject) error {
	// A state of any other length is none of ours: it is refused before it is decoded.
	encoded := strings.TrimPrefix(state, approvalStatePrefix)
	if len(encoded) != base64.RawURLEncoding.EncodedLen(approvalStateSize) {
		return errApprovalUnverified
	}
	raw, err := base64.RawURLEncoding.DecodeString(encoded)
	if err != nil || len(raw) != approvalStateSize || raw[0] != approvalStateVersion {
		return errApprovalUnverified
	}
	head, sum := raw[:approvalStateSize-sha256.Size], raw[approvalStateSize-sha256.Size:]
	if !hmac.Equal(sum, a.mac(head, s)) {
		return errApprovalUnverified
	}
	now := a.now()
	expires := time.Unix(int64(binary.BigEndian.Uint64(head[1:9])), 0) //nolint:gosec // the MAC vouches that issue wrote it
	if !now.Before(expires) {
		return errApprovalExpired
	}
	var nonce [approvalNonceSize]byte
	copy(nonce[:], head[9:])
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, used := a.spent[nonce]; used {
		return errApprovalSpent
	}
	if len(a.spent) >= maxSpentApprovals {
		for n, exp := range a.spent {
			if !now.Before(exp) {
				delete(a.spent, n)
			}
		}
		if len(a.spent) >= maxSpentApprovals {
			return errApprovalFull
		}
	}
	a.spent[nonce] = expires
	return nil
}

// approvalRound is a sessionless tools/call's part in an approval: whether its client can
// be asked, and what it sent back.
type approvalRound struct {
	// req is the request, whose _meta says whether the client can be asked (asks).
	req mcp.Request
	// state and responses are the request's requestState and inputResponses.
	state     string
	responses mcp.InputResponseMap
}

// roundOf is the approval round of req, a sessionless tools/call with params.
func roundOf(req mcp.Request, params *mcp.CallToolParamsRaw) approvalRound {
	return approvalRound{req: req, state: params.RequestState, responses: params.InputResponses}
}

// asks reports whether the round's client declared form elicitation. It is asked only
// of a call a policy requires approval for: go-sdk decodes the client's capabilities
// from _meta anew on every asking, which no other call needs.
func (r approvalRound) asks() bool {
	cr, ok := r.req.(*mcp.CallToolRequest)
	return ok && cr != nil && cr.Params != nil && asksForms(cr.ClientCapabilities())
}

// asksForms reports whether a client with caps may be sent a form elicitation: it
// declared elicitation, and not only by URL.
func asksForms(caps *mcp.ClientCapabilities) bool {
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	e := caps.Elicitation
	return e.Form != nil || e.URL == nil
}

// settleByInput finishes decide's verdict v (q.later) for a sessionless client: when v
// requires approval the request is either the client's answer (its requestState is the
// gateway's approval state), which settles it, or asks the question: then ask is the
// input_required result to answer with. A client that cannot be asked is refused (see
// errNoApproval); a request that resumes a bridged call (resuming) was approved when the
// call began, and its state is verified where it is resumed.
func (g *Gateway) settleByInput(ctx context.Context, q *query, v policy.Verdict, r approvalRound, resuming bool) (_ policy.Verdict, ask *mcp.CallToolResult) {
	if v.Effect != policy.EffectRequireApproval {
		return v, nil
	}
	switch {
	case resuming:
		q.approve = func(context.Context, approval) error { return nil }
	case !r.asks():
		q.approve = nil
	case strings.HasPrefix(r.state, approvalStatePrefix):
		q.approve = func(context.Context, approval) error {
			if err := g.approvals.redeem(r.state, subjectOf(q, v)); err != nil {
				return err
			}
			answer, _ := r.responses[approvalInputKey].(*mcp.ElicitResult)
			if answer == nil {
				return fmt.Errorf("inputResponses lack the answer to %q; call the tool again to be asked anew", approvalInputKey)
			}
			return approvalAnswer(answer, nil)
		}
	default:
		res, err := g.askByInput(q, v)
		if err == nil {
			if q.record != nil {
				q.record.decided(q.start, "")
			} else {
				policySpan(ctx, q.start, "")
			}
			q.log.Info("Approval requested", append(append([]any(nil), q.who...),
				"tool", clip(q.loggedName()), "policy", v.Policy, "rule", v.Rule)...)
			return v, res
		}
		q.approve = func(context.Context, approval) error { return err }
	}
	return g.settle(ctx, q, v), nil
}

// askByInput is the input_required result that asks the client's user to approve q.
func (g *Gateway) askByInput(q *query, v policy.Verdict) (*mcp.CallToolResult, error) {
	state, err := g.approvals.issue(subjectOf(q, v))
	if err != nil {
		return nil, err
	}
	wire, err := json.Marshal(map[string]any{
		"resultType": "input_required",
		"inputRequests": mcp.InputRequestMap{approvalInputKey: &mcp.ElicitParams{
			Mode: "form", Message: q.approval(v).message(), RequestedSchema: approvalSchema}},
		"requestState": state,
	})
	if err != nil {
		return nil, err
	}
	// Decoded by go-sdk from its wire form: go-sdk sets a result's type only as it
	// decodes one (see inputRequired).
	res := &mcp.CallToolResult{}
	if err := json.Unmarshal(wire, res); err != nil {
		return nil, err
	}
	return res, nil
}

// forwardedInput is what of a sessionless call's requestState and inputResponses goes
// on to the server: nothing of the gateway's approval or of a person's authorization,
// which are its own.
func forwardedInput(params *mcp.CallToolParamsRaw) (mcp.InputResponseMap, string) {
	return forwardedInputOf(params.InputResponses, params.RequestState)
}

// forwardedInputOf is forwardedInput of any request's input responses and state.
func forwardedInputOf(responses mcp.InputResponseMap, state string) (mcp.InputResponseMap, string) {
	_, authorized := responses[authorizationInputKey]
	approved := strings.HasPrefix(state, approvalStatePrefix)
	if !approved && !authorized {
		return responses, state
	}
	if approved {
		state = ""
	}
	var kept mcp.InputResponseMap
	for k, v := range responses {
		if k == approvalInputKey || k == authorizationInputKey {
			continue
		}
		if kept == nil {
			kept = mcp.InputResponseMap{}
		}
		kept[k] = v
	}
	return kept, state
}
