package gateway_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// Callers of the access policy tests: alice is in the finance group, bob in none.
const (
	financeToken  = "alice-token-51c2"
	outsiderToken = "bob-token-0d7e"
	// carol is in finance too.
	financeToken2 = "carol-token-9a41"
)

// tokenCallers authenticates the access policy tests' callers by their token.
type tokenCallers map[string]*identity.Caller

func (c tokenCallers) AuthenticateRequest(_ context.Context, r *http.Request) (*identity.Caller, error) {
	if caller, ok := c[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]; ok {
		return caller, nil
	}
	return nil, identity.ErrUnauthenticated
}

var policyCallers = tokenCallers{
	financeToken:  identity.NewCaller(authenticationv1.UserInfo{Username: "alice", Groups: []string{"finance", "system:authenticated"}}),
	outsiderToken: identity.NewCaller(authenticationv1.UserInfo{Username: "bob", Groups: []string{"system:authenticated"}}),
	financeToken2: identity.NewCaller(authenticationv1.UserInfo{Username: "carol", Groups: []string{"finance", "system:authenticated"}}),
}

// withPolicyCallers makes a gateway authenticate alice and bob, who may use every server
// and toolset (RBAC lets them in: the access policies decide the rest).
func withPolicyCallers(o *gateway.Options) {
	o.Authenticator = policyCallers
	o.Access = toolsetGrants(map[string][]string{
		"alice": {"mcpservers/notes", "mcpservers/tickets", "mcptoolsets/support-agent"},
		"bob":   {"mcpservers/notes", "mcpservers/tickets", "mcptoolsets/support-agent"},
		"carol": {"mcpservers/notes", "mcpservers/tickets", "mcptoolsets/support-agent"},
	}).AuthorizationV1().SubjectAccessReviews()
}

// notesPolicy is the access policy of the notes server: finance may call echo with a
// text under acme/, search_notes, and delete_all once the user approves, but nobody may
// force a delete; nobody else may call anything.
func notesPolicy(enforcement mcpv1alpha1.AccessPolicyEnforcement) *mcpv1alpha1.MCPAccessPolicy {
	finance := []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "finance"}}
	return &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "notes-access", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs:  []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "notes"}},
			Enforcement: enforcement,
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{Subjects: finance, Tools: []string{"echo"}, Action: mcpv1alpha1.AccessPolicyAllow,
					When: `has(arguments.text) && arguments.text.startsWith("acme/")`},
				{Subjects: finance, Tools: []string{"search_notes"}, Action: mcpv1alpha1.AccessPolicyAllow},
				{Subjects: finance, Tools: []string{"delete_all"}, Action: mcpv1alpha1.AccessPolicyRequireApproval},
				{Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "system:authenticated"}},
					Tools: []string{"delete_*"}, Action: mcpv1alpha1.AccessPolicyDeny, When: `has(arguments.force) && arguments.force == true`},
			},
		},
	}
}

// frontDoor is one way an agent reaches the notes server's tools through the gateway,
// and the names it sees them under.
type frontDoor struct {
	name                 string
	connect              func(t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession
	echo, search, delete string
}

// policyFrontDoors starts a gateway with the notes server, its access policy and a toolset
// over it, and returns every front door to it: the server's endpoint in both eras and
// the toolset's in both eras.
func policyFrontDoors(t *testing.T, enforcement mcpv1alpha1.AccessPolicyEnforcement) (*toolsetHarness, []frontDoor) {
	h := newToolsetHarness(t, withPolicyCallers)
	ts := h.toolset.DeepCopy()
	ts.Spec.Tools.Deny = nil // the toolset shows delete_all: the policy decides
	h.gw.UpdateToolset(ts)
	h.gw.UpdatePolicy(notesPolicy(enforcement))
	server := h.front.URL + gatewaypath.Server(namespace, "notes")
	dial := func(endpoint, version string) func(t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
		return func(t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
			t.Helper()
			return connectAs(t, endpoint, token, version, opts)
		}
	}
	direct := func(name, endpoint, version string) frontDoor {
		return frontDoor{name: name, connect: dial(endpoint, version), echo: "echo", search: "search_notes", delete: "delete_all"}
	}
	toolset := func(name, version string) frontDoor {
		return frontDoor{name: name, connect: dial(h.url(), version), echo: "notes_echo", search: "search", delete: "notes_delete_all"}
	}
	return h, []frontDoor{
		direct("server session", server, sessionEra),
		direct("server sessionless", server, sessionlessVersion),
		toolset("toolset session", sessionEra),
		toolset("toolset sessionless", sessionlessVersion),
	}
}

// An MCPAccessPolicy on a server decides, for every front door and both eras, who may
// call which of its tools with which arguments, and who sees which in tools/list: a call
// no rule allows is refused with the policy's name before it reaches the server, and is
// audited with the policy and rule that decided.
func TestAnAccessPolicyDecidesAtEveryFrontDoor(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			before := h.notes.calls("tools/call")
			alice := door.connect(t, financeToken, nil)
			names := toolNames(t, alice)
			for _, want := range []string{door.echo, door.search, door.delete} {
				if !slices.Contains(names, want) {
					t.Errorf("alice's tools/list = %v, want %s in it", names, want)
				}
			}
			if text, err := callText(t, alice, door.echo, map[string]any{"text": "acme/report"}); err != nil || text != "acme/report" {
				t.Errorf("alice's %s(acme/report) = %q, %v; want it to run", door.echo, text, err)
			}
			if text, err := callText(t, alice, door.search, nil); err != nil || text != "found" {
				t.Errorf("alice's %s = %q, %v; want it to run", door.search, text, err)
			}
			_, err := callText(t, alice, door.echo, map[string]any{"text": "other/report"})
			if err == nil || !strings.Contains(err.Error(), "no rule of the access policies") {
				t.Errorf("alice's %s(other/report) = %v; want it refused: no rule of the access policy allows it", door.echo, err)
			}
			if err != nil && strings.Contains(err.Error(), "other/report") {
				t.Errorf("the refusal quotes the arguments: %v", err)
			}
			_, err = callText(t, alice, door.delete, map[string]any{"force": true})
			if err == nil || !strings.Contains(err.Error(), "rule 3 of access policy team-a/notes-access denies") {
				t.Errorf("alice's forced %s = %v; want it refused, naming the policy and rule", door.delete, err)
			}

			bob := door.connect(t, outsiderToken, nil)
			for _, name := range toolNames(t, bob) {
				if name == door.echo || name == door.search || name == door.delete {
					t.Errorf("bob's tools/list shows %s, which no rule lets him call", name)
				}
			}
			if _, err := callText(t, bob, door.search, nil); err == nil {
				t.Errorf("bob's %s ran; no rule allows it", door.search)
			}
			if got := h.notes.calls("tools/call") - before; got != 2 {
				t.Errorf("the server received %d tools/call, want alice's 2 allowed ones", got)
			}
		})
	}
	if lines := h.audit.matching(`"Tool call"`, `"outcome"="denied"`, `"policy"="team-a/notes-access"`, `"rule"=3`); len(lines) == 0 {
		t.Errorf("no audit line of a refusal names the deciding policy and rule:\n%s", h.audit.all())
	}
	if lines := h.audit.matching(`"Tool call"`, `"outcome"="ok"`, `"policy"="team-a/notes-access"`, `"rule"=1`); len(lines) == 0 {
		t.Errorf("no audit line of an allowed call names the policy and rule that allowed it:\n%s", h.audit.all())
	}
	if strings.Contains(h.audit.all(), "acme/report") || strings.Contains(h.audit.all(), "other/report") {
		t.Errorf("the audit log quotes arguments:\n%s", h.audit.all())
	}
	if n := policyDecisions(t, h, "Deny", "Enforce"); n == 0 {
		t.Errorf("switchboard_gateway_policy_decisions_total{effect=Deny,enforcement=Enforce} = 0")
	}
}

// policyDecisions is the decisions counter of effect and enforcement.
func policyDecisions(t *testing.T, h *toolsetHarness, effect, enforcement string) float64 {
	t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchboard_gateway_policy_decisions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["effect"] == effect && labels["enforcement"] == enforcement {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// An Audit policy decides as if enforced, logs and counts what it would have refused,
// and refuses nothing.
func TestAnAuditPolicyRefusesNothing(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyAudit)
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			bob := door.connect(t, outsiderToken, nil)
			if !slices.Contains(toolNames(t, bob), door.search) {
				t.Errorf("an Audit policy hides %s from bob", door.search)
			}
			if text, err := callText(t, bob, door.search, nil); err != nil || text != "found" {
				t.Errorf("bob's %s = %q, %v; an Audit policy refuses nothing", door.search, text, err)
			}
		})
	}
	if lines := h.audit.matching(`"Access policy audit"`, `"effect"="Deny"`, `"caller"="bob"`); len(lines) == 0 {
		t.Errorf("no audit line says what the Audit policy would have refused:\n%s", h.audit.all())
	}
	if n := policyDecisions(t, h, "Deny", "Audit"); n < 4 {
		t.Errorf("switchboard_gateway_policy_decisions_total{effect=Deny,enforcement=Audit} = %v, want one per front door", n)
	}
}

// A policy on a toolset governs the calls made through it, and a policy on the server
// still governs its tools there: both must allow.
func TestAToolsetPolicyGovernsCallsThroughTheToolset(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	h.gw.UpdatePolicy(&mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "no-search-in-toolsets", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPToolset, Name: "support-agent"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "system:authenticated"}},
					Tools: []string{"*"}, Action: mcpv1alpha1.AccessPolicyAllow},
				{Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "finance"}},
					Tools: []string{"search"}, Action: mcpv1alpha1.AccessPolicyDeny},
			},
		},
	})
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			alice := door.connect(t, financeToken, nil)
			_, err := callText(t, alice, door.search, nil)
			throughToolset := strings.HasPrefix(door.name, "toolset")
			switch {
			case throughToolset && err == nil:
				t.Errorf("alice's %s through the toolset ran; the toolset's policy denies it", door.search)
			case !throughToolset && err != nil:
				t.Errorf("alice's %s at the server = %v; the toolset's policy does not govern the server's endpoint", door.search, err)
			}
			if throughToolset && slices.Contains(toolNames(t, alice), door.search) {
				t.Errorf("the toolset lists %s to alice, whom its policy denies it", door.search)
			}
			// The server's policy still governs its tools through the toolset.
			if _, err := callText(t, alice, door.echo, map[string]any{"text": "elsewhere"}); err == nil {
				t.Errorf("alice's %s(elsewhere) ran; the server's policy refuses it", door.echo)
			}
		})
	}
}

// A tool a policy requires approval for runs once the calling client's user approves it
// (a 2025-11-25 client with form elicitation is asked on its session, a 2026-07-28 one by
// input_required), and is refused with a reason the agent can show when the user
// declines or cancels, or the client cannot be asked.
func TestRequireApprovalAsksTheCallingClient(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	answering := func(action string, asked *[]string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			*asked = append(*asked, req.Params.Message)
			return &mcp.ElicitResult{Action: action}, nil
		}}
	}
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			before := h.notes.calls("tools/call")
			var asked []string
			accepting := door.connect(t, financeToken, answering("accept", &asked))
			if text, err := callText(t, accepting, door.delete, nil); err != nil || text != "deleted" {
				t.Errorf("an approved %s = %q, %v; want it to run", door.delete, text, err)
			}
			if len(asked) != 1 || !strings.Contains(asked[0], door.delete) || !strings.Contains(asked[0], "notes-access") {
				t.Errorf("the user was asked %q; want one question naming the tool and the policy", asked)
			}
			for _, action := range []string{"decline", "cancel"} {
				asked = nil
				refusing := door.connect(t, financeToken, answering(action, &asked))
				if _, err := callText(t, refusing, door.delete, nil); err == nil || !strings.Contains(err.Error(), "the user "+action) {
					t.Errorf("%s answered %s = %v; want it refused, saying the user did", door.delete, action, err)
				}
				if len(asked) != 1 {
					t.Errorf("the user was asked %d times, want once", len(asked))
				}
			}
			unaskable := door.connect(t, financeToken, nil)
			if _, err := callText(t, unaskable, door.delete, nil); err == nil || !strings.Contains(err.Error(), "cannot be asked") {
				t.Errorf("%s from a client that cannot be asked = %v; want it refused, saying why", door.delete, err)
			}
			if got := h.notes.calls("tools/call") - before; got != 1 {
				t.Errorf("the server received %d tools/call, want 1 (the approved one)", got)
			}
		})
	}
}

// echoApproval is an access policy that has finance approve every echo of a text under
// approve/ (the notes policy allows echo only under acme/).
func echoApproval() *mcpv1alpha1.MCPAccessPolicy {
	return &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "echo-approval", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "notes"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{{
				Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "finance"}},
				Tools:    []string{"echo"}, Action: mcpv1alpha1.AccessPolicyRequireApproval,
				When: `has(arguments.text) && arguments.text.startsWith("approve/")`,
			}},
		},
	}
}

// The approval question shows the call's arguments, clipped to 1 KiB, at every front door.
func TestAnApprovalShowsTheArguments(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	h.gw.UpdatePolicy(echoApproval())
	long := "approve/" + strings.Repeat("x", 4096)
	for _, door := range doors {
		t.Run(door.name, func(t *testing.T) {
			var asked []string
			alice := door.connect(t, financeToken, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked = append(asked, req.Params.Message)
				return &mcp.ElicitResult{Action: "accept"}, nil
			}})
			if text, err := callText(t, alice, door.echo, map[string]any{"text": "approve/budget"}); err != nil || text != "approve/budget" {
				t.Errorf("an approved %s = %q, %v; want it to run", door.echo, text, err)
			}
			if len(asked) != 1 || !strings.Contains(asked[0], `{"text":"approve/budget"}`) || !strings.Contains(asked[0], "echo-approval") {
				t.Errorf("the user was asked %q; want the arguments and the policy shown", asked)
			}
			asked = nil
			if text, err := callText(t, alice, door.echo, map[string]any{"text": long}); err != nil || text != long {
				t.Errorf("an approved %s of 4 KiB = %.40q, %v; want it to run", door.echo, text, err)
			}
			if len(asked) != 1 || !strings.Contains(asked[0], `{"text":"approve/xxx`) || !strings.Contains(asked[0], "clipped") || len(asked[0]) > 1024+512 {
				t.Errorf("the user was asked %.200q (%d bytes in all); want the arguments shown clipped to 1 KiB", asked, len(strings.Join(asked, "")))
			}
		})
	}
}

// A toolset in Search mode finds only the tools the caller may call, and its call_tool
// is judged as a direct call.
func TestAToolsetInSearchModeFindsOnlyWhatThePolicyAllows(t *testing.T) {
	h, _ := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	ts := h.gwToolset()
	ts.Spec.Discovery = mcpv1alpha1.ToolsetDiscoverySearch
	h.gw.UpdateToolset(ts)
	for _, who := range []struct {
		token string
		finds bool
	}{{financeToken, true}, {outsiderToken, false}} {
		cs, err := h.connect(who.token, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": "search notes"}})
		if err != nil || res.IsError {
			t.Fatalf("find_tools: %v %+v", err, res)
		}
		found := false
		for _, f := range res.StructuredContent.(map[string]any)["tools"].([]any) {
			found = found || f.(map[string]any)["name"] == "search"
		}
		if found != who.finds {
			t.Errorf("find_tools(search notes) for %s finds search: %v, want %v", who.token, found, who.finds)
		}
		_, err = callText(t, cs, "call_tool", map[string]any{"name": "search"})
		if (err == nil) != who.finds {
			t.Errorf("call_tool(search) for %s: %v; want it to run: %v", who.token, err, who.finds)
		}
	}
}

// A toolset in Search mode puts a call_tool that needs approval to a 2026-07-28 client's
// user by input_required, as a direct call.
func TestAToolsetInSearchModeAsksForApprovalByInput(t *testing.T) {
	h, _ := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	ts := h.gwToolset()
	ts.Spec.Discovery = mcpv1alpha1.ToolsetDiscoverySearch
	h.gw.UpdateToolset(ts)
	for _, action := range []string{"accept", "decline"} {
		var asked []string
		cs := connectSessionlessAs(t, h.url(), financeToken, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked = append(asked, req.Params.Message)
			return &mcp.ElicitResult{Action: action}, nil
		}})
		text, err := callText(t, cs, "call_tool", map[string]any{"name": "notes_delete_all"})
		switch {
		case action == "accept" && (err != nil || text != "deleted"):
			t.Errorf("an approved call_tool(notes_delete_all) = %q, %v; want it to run", text, err)
		case action == "decline" && (err == nil || !strings.Contains(err.Error(), "declined")):
			t.Errorf("a declined call_tool(notes_delete_all) = %v; want it refused", err)
		}
		if len(asked) != 1 || !strings.Contains(asked[0], "notes_delete_all") {
			t.Errorf("the user was asked %q; want one question naming the tool", asked)
		}
	}
}

// connectSessionlessAs connects a 2026-07-28 client to endpoint with token.
func connectSessionlessAs(t *testing.T, endpoint, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectAs(t, endpoint, token, sessionlessVersion, opts)
}

// gwToolset is a copy of the toolset as the harness last gave it, with delete_all shown.
func (h *toolsetHarness) gwToolset() *mcpv1alpha1.MCPToolset {
	ts := h.toolset.DeepCopy()
	ts.Spec.Tools.Deny = nil
	return ts
}

// The third security review's probe: a pinned server whose published tools left their
// pin refuses every call, in a session and from a 2026-07-28 client alike, with the same
// reason, and the server never sees the call.
func TestAPinnedServerWhoseToolsLeftThePinRefusesInBothEras(t *testing.T) {
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Tools = &mcpv1alpha1.ToolFilter{PinnedDigest: "sha256:" + strings.Repeat("0", 64)}
		obj.Status.ToolsDigest = "sha256:" + strings.Repeat("1", 64)
	}})
	reasons := map[string]string{}
	for era, cs := range map[string]*mcp.ClientSession{sessionEra: h.connect(nil), sessionlessVersion: h.connectSessionless()} {
		_, err := callText(t, cs, "echo", map[string]any{"text": "hi"})
		if err == nil || !strings.Contains(err.Error(), "changed since they were pinned") {
			t.Errorf("a %s client's call of a server whose tools left their pin = %v; want it refused", era, err)
			continue
		}
		reasons[era] = wireError(err)
	}
	if reasons[sessionEra] != reasons[sessionlessVersion] {
		t.Errorf("the eras are refused for different reasons:\n%s: %s\n%s: %s", sessionEra, reasons[sessionEra], sessionlessVersion, reasons[sessionlessVersion])
	}
	if n := h.upstream.calls("tools/call"); n != 0 {
		t.Errorf("the server received %d tools/call", n)
	}
}

// A 2026-07-28 client's approval answers one call: the requestState the gateway asked
// under does not approve the call with other arguments, for another caller, once
// altered, or a second time; the server sees only the approved call.
func TestASessionlessApprovalAnswersOneCallOnly(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	h.gw.UpdatePolicy(echoApproval())
	// Clients that see the input_required themselves, and answer by hand.
	manual := &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, errors.New("answered by hand")
		},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}
	call := func(cs *mcp.ClientSession, p *mcp.CallToolParams) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cs.CallTool(ctx, p)
	}
	for _, door := range doors {
		if !strings.HasSuffix(door.name, "sessionless") {
			continue
		}
		t.Run(door.name, func(t *testing.T) {
			before := h.notes.calls("tools/call")
			alice, carol := door.connect(t, financeToken, manual), door.connect(t, financeToken2, manual)
			args := map[string]any{"text": "approve/q3"}
			res, err := call(alice, &mcp.CallToolParams{Name: door.echo, Arguments: args})
			if err != nil || !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" {
				t.Fatalf("a call that needs approval = %+v, %v; want input_required with one question", res, err)
			}
			var key string
			for k, q := range res.InputRequests {
				key = k
				if e, ok := q.(*mcp.ElicitParams); !ok || !strings.Contains(e.Message, "approve/q3") {
					t.Errorf("the question is %#v; want a form elicitation showing the call", q)
				}
			}
			accept := mcp.InputResponseMap{key: &mcp.ElicitResult{Action: "accept"}}
			answer := func(cs *mcp.ClientSession, args map[string]any, state string) error {
				_, err := call(cs, &mcp.CallToolParams{Name: door.echo, Arguments: args, InputResponses: accept, RequestState: state})
				return err
			}
			tampered := []byte(res.RequestState)
			tampered[len(tampered)-5] ^= 1
			for what, err := range map[string]error{
				"other arguments":  answer(alice, map[string]any{"text": "approve/all"}, res.RequestState),
				"another caller":   answer(carol, args, res.RequestState),
				"an altered state": answer(alice, args, string(tampered)),
			} {
				if err == nil || !strings.Contains(err.Error(), "does not verify") {
					t.Errorf("an approval answered for %s = %v; want it refused, saying it does not verify", what, err)
				}
			}
			if err := answer(alice, args, res.RequestState); err != nil {
				t.Errorf("the approval of the call asked about = %v; want it to run", err)
			}
			if err := answer(alice, args, res.RequestState); err == nil || !strings.Contains(err.Error(), "used already") {
				t.Errorf("the same approval a second time = %v; want it refused", err)
			}
			if got := h.notes.calls("tools/call") - before; got != 1 {
				t.Errorf("the server received %d tools/call, want the approved one", got)
			}
		})
	}
	if lines := h.audit.matching(`"Approval requested"`, `"policy"="team-a/echo-approval"`); len(lines) == 0 {
		t.Errorf("no audit line says an approval was requested:\n%s", h.audit.all())
	}
}

// A policy that names resources and prompts governs resources/read and prompts/get at a
// server's endpoint in both eras: what a rule allows is read, everything else refused
// before it reaches the server.
func TestAnAccessPolicyGovernsResourcesAndPrompts(t *testing.T) {
	h, doors := policyFrontDoors(t, mcpv1alpha1.AccessPolicyEnforce)
	for _, uri := range []string{"note://public/readme", "note://private/salaries"} {
		h.notes.mcp.AddResource(&mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"},
			func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "contents"}}}, nil
			})
	}
	for _, name := range []string{"summarize", "leak"} {
		h.notes.mcp.AddPrompt(&mcp.Prompt{Name: name}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "say it"}}}}, nil
		})
	}
	h.gw.UpdatePolicy(&mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "notes-reads", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "notes"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "finance"}},
					Resources: []string{"note://public/*"}, Prompts: []string{"summarize"}, Action: mcpv1alpha1.AccessPolicyAllow},
			},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, door := range doors {
		// A toolset exposes the notes server's resources and prompts under its own
		// names: URIs wrapped with the origin's name, prompts with its prefix.
		uri, prompt := func(u string) string { return u }, func(p string) string { return p }
		if strings.HasPrefix(door.name, "toolset") {
			uri = func(u string) string { return "switchboard+notes:" + u }
			prompt = func(p string) string { return "notes_" + p }
		}
		t.Run(door.name, func(t *testing.T) {
			before := h.notes.calls("resources/read") + h.notes.calls("prompts/get")
			alice, bob := door.connect(t, financeToken, nil), door.connect(t, outsiderToken, nil)
			if res, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri("note://public/readme")}); err != nil || len(res.Contents) != 1 ||
				res.Contents[0].URI != uri("note://public/readme") {
				t.Errorf("alice reading note://public/readme = %v; want it read, under the URI asked for", err)
			}
			if _, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt("summarize")}); err != nil {
				t.Errorf("alice getting prompt summarize = %v; want it", err)
			}
			for what, err := range map[string]error{
				"alice reading note://private/salaries": func() error {
					_, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri("note://private/salaries")})
					return err
				}(),
				"alice getting prompt leak": func() error {
					_, err := alice.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt("leak")})
					return err
				}(),
				"bob reading note://public/readme": func() error {
					_, err := bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri("note://public/readme")})
					return err
				}(),
				"bob getting prompt summarize": func() error {
					_, err := bob.GetPrompt(ctx, &mcp.GetPromptParams{Name: prompt("summarize")})
					return err
				}(),
			} {
				if err == nil || !strings.Contains(err.Error(), "access polic") {
					t.Errorf("%s = %v; want it refused by the access policy", what, err)
				}
			}
			// A refused URI's query string may carry a secret: neither the refusal nor the
			// audit log quotes it. (Through a toolset the URI is not one it serves.)
			_, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri("note://private/salaries?token=s3cr3t-query")})
			if err == nil || strings.Contains(err.Error(), "s3cr3t-query") {
				t.Errorf("alice reading a private note with a query = %v; want it refused without the query", err)
			}
			if strings.Contains(h.audit.all(), "s3cr3t-query") {
				t.Errorf("the audit log quotes a refused URI's query string:\n%s", h.audit.all())
			}
			if got := h.notes.calls("resources/read") + h.notes.calls("prompts/get") - before; got != 2 {
				t.Errorf("the server received %d resources/read and prompts/get, want alice's 2 allowed ones", got)
			}
		})
	}
}

// A stdio server behind the bridge, as a server pod runs it (npm server-everything), is
// governed like any other at its endpoint, in both eras: allowed, denied, listed,
// unlisted, and approval accepted, declined and unsupported.
func TestAnAccessPolicyGovernsAStdioServerBehindTheBridge(t *testing.T) {
	alice := policyCallers[financeToken]
	h := newHarness(t, harnessOptions{upstreamURL: startEverythingBridge(t), gateway: func(o *gateway.Options) {
		o.Authenticator = tokenCallers{callerToken: alice}
		o.Access = toolsetGrants(map[string][]string{"alice": {"mcpservers/notes"}}).AuthorizationV1().SubjectAccessReviews()
	}})
	finance := []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "finance"}}
	h.gw.UpdatePolicy(&mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "everything-access", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "notes"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{Subjects: finance, Tools: []string{"echo"}, Action: mcpv1alpha1.AccessPolicyAllow,
					When: `has(arguments.message) && arguments.message.startsWith("ok/")`},
				{Subjects: finance, Tools: []string{"echo"}, Action: mcpv1alpha1.AccessPolicyRequireApproval,
					When: `has(arguments.message) && arguments.message.startsWith("approve/")`},
			},
		},
	})
	answering := func(action string) *mcp.ClientOptions {
		return &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: action}, nil
		}}
	}
	for _, sessionless := range []bool{false, true} {
		connect := h.connect
		name := sessionEra
		if sessionless {
			connect = func(opts *mcp.ClientOptions) *mcp.ClientSession { return connectSessionlessTo(t, h.url(), opts) }
			name = sessionlessVersion
		}
		t.Run(name, func(t *testing.T) {
			cs := connect(nil)
			if names := toolNames(t, cs); !slices.Equal(names, []string{"echo"}) {
				t.Errorf("tools/list = %v, want only echo, which the policy lets alice call", names)
			}
			if text, err := callText(t, cs, "echo", map[string]any{"message": "ok/hello"}); err != nil || !strings.Contains(text, "ok/hello") {
				t.Errorf("echo(ok/hello) = %q, %v; want it to run", text, err)
			}
			if _, err := callText(t, cs, "echo", map[string]any{"message": "elsewhere"}); err == nil || !strings.Contains(err.Error(), "no rule of the access policies") {
				t.Errorf("echo(elsewhere) = %v; want it refused", err)
			}
			if _, err := callText(t, cs, "get-sum", map[string]any{"a": 1, "b": 2}); err == nil || !strings.Contains(err.Error(), "no rule of the access policies") {
				t.Errorf("get-sum = %v; want it refused: no rule allows it", err)
			}
			if _, err := callText(t, cs, "echo", map[string]any{"message": "approve/x"}); err == nil || !strings.Contains(err.Error(), "cannot be asked") {
				t.Errorf("echo(approve/x) from a client that cannot be asked = %v; want it refused", err)
			}
			if text, err := callText(t, connect(answering("accept")), "echo", map[string]any{"message": "approve/x"}); err != nil || !strings.Contains(text, "approve/x") {
				t.Errorf("an approved echo(approve/x) = %q, %v; want it to run", text, err)
			}
			if _, err := callText(t, connect(answering("decline")), "echo", map[string]any{"message": "approve/x"}); err == nil || !strings.Contains(err.Error(), "declined") {
				t.Errorf("a declined echo(approve/x) = %v; want it refused", err)
			}
		})
	}
}

// A policy judges an MCPIdentityProvider caller's token claims (caller.claims), in both
// eras: a rule on the department claim allows the caller whose token says finance and
// refuses one whose token says nothing of it.
func TestAnAccessPolicyJudgesTheClaimsOfAnIdentityProviderCaller(t *testing.T) {
	op := testutil.StartOP(t)
	providers := identity.NewProviders(identity.Options{})
	if err := providers.Apply(context.Background(), identity.ProviderConfig{
		Name: "corp", Generation: 1, IssuerURL: op.URL(), Audiences: []string{"https://mcp.example.com"},
		AllowInsecureHTTP: true, UsernameClaim: "email", UsernamePrefix: "oidc:",
	}); err != nil {
		t.Fatal(err)
	}
	token := func(email string, extra map[string]any) string {
		claims := map[string]any{"iss": op.URL(), "sub": email, "aud": "https://mcp.example.com", "email": email,
			"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
		maps.Copy(claims, extra)
		return op.Sign(op.Published, "k1", claims)
	}
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = identity.NewAuthenticator(&refusingReviews{}, nil, identity.AuthenticatorOptions{IdentityProviders: providers})
		o.Access = toolsetGrants(map[string][]string{
			"oidc:alice@example.com": {"mcpservers/notes"}, "oidc:bob@example.com": {"mcpservers/notes"},
		}).AuthorizationV1().SubjectAccessReviews()
	}})
	h.gw.UpdatePolicy(&mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "finance-only", Generation: 1},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "notes"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{{
				Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "system:authenticated"}},
				Tools:    []string{"search_notes"}, Action: mcpv1alpha1.AccessPolicyAllow,
				When: `caller.claims.department == "finance"`,
			}},
		},
	})
	alice := token("alice@example.com", map[string]any{"department": "finance", "address": map[string]any{"city": "Oslo"}})
	bob := token("bob@example.com", nil)
	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version, func(t *testing.T) {
			connect := func(token string) *mcp.ClientSession {
				if version == sessionlessVersion {
					return connectSessionlessAs(t, h.url(), token, nil)
				}
				cs, err := h.tryConnect(token, nil)
				if err != nil {
					t.Fatal(err)
				}
				return cs
			}
			if text, err := callText(t, connect(alice), "search_notes", nil); err != nil || text != "found" {
				t.Errorf("search_notes by a caller of the finance department = %q, %v; want it to run", text, err)
			}
			if _, err := callText(t, connect(bob), "search_notes", nil); err == nil || !strings.Contains(err.Error(), "access polic") {
				t.Errorf("search_notes by a caller whose token names no department = %v; want it refused by the policy", err)
			}
		})
	}
}
