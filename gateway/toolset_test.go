package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// toolsetHarness is a pool with sessions to two real go-sdk servers, notes (echo,
// search_notes, delete_all) and tickets (create_ticket, ask), and a gateway that
// serves a toolset over both.
type toolsetHarness struct {
	t       testing.TB
	pool    *connector.Pool
	gw      *gateway.Gateway
	front   *httptest.Server
	notes   *upstreamServer
	tickets *upstreamServer
	audit   *logLines
	toolset *mcpv1alpha1.MCPToolset
	metrics *prometheus.Registry
}

// newTicketsUpstream is an upstream with create_ticket and ask, whose call asks the
// client for a value through elicitation and answers with it.
func newTicketsUpstream(t testing.TB) *upstreamServer {
	u := newUpstream(t)
	u.mcp.RemoveTools("echo", "search_notes", "delete_all")
	mcp.AddTool(u.mcp, &mcp.Tool{Name: "create_ticket", Description: "Creates a ticket."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "created"}}}, nil, nil
		})
	mcp.AddTool(u.mcp, &mcp.Tool{Name: "ask", Description: "Asks the user for a priority."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: "Which priority?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
					"priority": map[string]any{"type": "string"}}},
			})
			if err != nil {
				return nil, nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: res.Action + ":" + fmt.Sprint(res.Content["priority"])}}}, nil, nil
		})
	return u
}

func newToolsetHarness(t testing.TB, opts func(*gateway.Options)) *toolsetHarness {
	t.Helper()
	h := &toolsetHarness{t: t, notes: newUpstream(t), tickets: newTicketsUpstream(t), audit: &logLines{}}
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	h.pool = pool
	for name, u := range map[string]*upstreamServer{"notes": h.notes, "tickets": h.tickets} {
		key := connector.Key{Namespace: namespace, Name: name}
		pool.Ensure(key, connector.Config{
			URL: u.URL, Protocol: connector.ProtocolStreamableHTTP,
			Headers: []connector.Header{{Name: "Authorization", Value: upstreamSecret}},
			Timeout: 5 * time.Second, HealthCheck: connector.HealthCheck{Interval: time.Hour},
			Egress: loopbackRules(t),
		})
		testutil.Eventually(t, 10*time.Second, "the pool's session with "+name, func() error {
			if snap, _ := pool.Snapshot(key); snap.State != connector.StateReady {
				return fmt.Errorf("state %s", snap.State)
			}
			return nil
		})
	}
	h.metrics = prometheus.NewRegistry()
	o := gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex, Audit: h.audit.logger(), Registerer: h.metrics}
	if opts != nil {
		opts(&o)
	}
	gw, err := gateway.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	h.gw = gw
	for _, name := range []string{"notes", "tickets"} {
		obj := readyServer(connector.Key{Namespace: namespace, Name: name})
		obj.Labels = map[string]string{"app": name}
		gw.Update(obj)
	}
	h.toolset = &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "support-agent", Generation: 1},
		Spec: mcpv1alpha1.MCPToolsetSpec{
			Servers: []mcpv1alpha1.ToolsetServer{
				{Name: "notes"},
				{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "tickets"}}, Prefix: ptr.To("t_")},
			},
			Tools: &mcpv1alpha1.ToolsetTools{
				Deny:      []string{"*delete*"},
				Overrides: []mcpv1alpha1.ToolOverride{{Name: "notes_search_notes", Rename: "search", Description: "Search the team's notes."}},
			},
		},
	}
	gw.UpdateToolset(h.toolset)
	h.front = httptest.NewServer(gw.Handler())
	t.Cleanup(h.front.Close)
	return h
}

func (h *toolsetHarness) url() string {
	return h.front.URL + gatewaypath.Toolset(namespace, "support-agent")
}

// connect opens a client session on the toolset endpoint with the caller's token.
func (h *toolsetHarness) connect(token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: h.url(), HTTPClient: &http.Client{Transport: bearer{token: token}}, MaxRetries: -1,
	}, sessionEraClient)
	if err == nil {
		h.t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// toolNames lists the session's tools, sorted.
func toolNames(t testing.TB, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	sort.Strings(names)
	return names
}

func TestToolsetListsAndCallsToolsOfTwoServersInOneSession(t *testing.T) {
	h := newToolsetHarness(t, nil)
	notesInits, ticketsInits := h.notes.calls("initialize"), h.tickets.calls("initialize")

	cs, err := h.connect("", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Upstream sessions open lazily: initialize alone opens none.
	if h.notes.calls("initialize") != notesInits || h.tickets.calls("initialize") != ticketsInits {
		t.Errorf("initialize on the toolset opened upstream sessions")
	}

	if got, want := toolNames(t, cs), []string{"notes_echo", "search", "t_ask", "t_create_ticket"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	ctx := context.Background()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "search" && tool.Description != "Search the team's notes." {
			t.Errorf("search description = %q, want the override", tool.Description)
		}
		if tool.Name == "notes_echo" && !strings.Contains(fmt.Sprint(tool.InputSchema), "text") {
			t.Errorf("notes_echo input schema %v lost the origin's properties", tool.InputSchema)
		}
	}

	if text, err := callText(t, cs, "notes_echo", map[string]any{"text": "hello"}); err != nil || text != "hello" {
		t.Errorf("notes_echo = %q, %v; want hello", text, err)
	}
	if text, err := callText(t, cs, "search", nil); err != nil || text != "found" {
		t.Errorf("search = %q, %v; want found", text, err)
	}
	if text, err := callText(t, cs, "t_create_ticket", nil); err != nil || text != "created" {
		t.Errorf("t_create_ticket = %q, %v; want created", text, err)
	}
	// A tool the toolset denies is neither listed nor callable, under either name.
	for _, name := range []string{"notes_delete_all", "delete_all"} {
		if _, err := callText(t, cs, name, nil); err == nil {
			t.Errorf("%s was callable", name)
		}
	}
	if h.notes.calls("initialize") != notesInits+1 || h.tickets.calls("initialize") != ticketsInits+1 {
		t.Errorf("one upstream session per origin expected: notes %d, tickets %d initializes",
			h.notes.calls("initialize")-notesInits, h.tickets.calls("initialize")-ticketsInits)
	}
	// The caller's credentials never reach an origin; the origin's own header does.
	for _, u := range []*upstreamServer{h.notes, h.tickets} {
		for _, v := range u.seenHeaders("Authorization") {
			if v != upstreamSecret {
				t.Errorf("an origin received Authorization %q", v)
			}
		}
	}
	if lines := h.audit.matching("Tool call", `"tool"="notes_echo"`, `"server"="notes"`, `"serverTool"="echo"`, `"outcome"="ok"`); len(lines) != 1 {
		t.Errorf("audit lines for notes_echo: %q\nall:\n%s", lines, h.audit.all())
	}

	openSessions := func() float64 {
		families, err := h.metrics.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == "switchboard_gateway_toolset_sessions" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	if got := openSessions(); got != 1 {
		t.Errorf("switchboard_gateway_toolset_sessions = %v, want 1", got)
	}

	// Closing the client session closes its upstream sessions.
	deletes := func(u *upstreamServer) int { return strings.Count(strings.Join(u.methods(), " "), http.MethodDelete) }
	_ = cs.Close()
	testutil.Eventually(t, 10*time.Second, "the toolset session to be counted closed", func() error {
		if got := openSessions(); got != 0 {
			return fmt.Errorf("switchboard_gateway_toolset_sessions = %v", got)
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, "the upstream sessions to be closed", func() error {
		if deletes(h.notes) < 1 || deletes(h.tickets) < 1 {
			return fmt.Errorf("DELETEs: notes %d, tickets %d", deletes(h.notes), deletes(h.tickets))
		}
		return nil
	})
}

func TestToolsetRelaysElicitationDuringACall(t *testing.T) {
	h := newToolsetHarness(t, nil)
	var asked atomic.Value
	cs, err := h.connect("", &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Store(req.Params.Message)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"priority": "high"}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	text, err := callText(t, cs, "t_ask", nil)
	if err != nil || text != "accept:high" {
		t.Fatalf("t_ask = %q, %v; want accept:high", text, err)
	}
	if asked.Load() != "Which priority?" {
		t.Errorf("the client was asked %v", asked.Load())
	}
}

// toolsetGrants answers SubjectAccessReviews: user -> "resource/name" it may use.
func toolsetGrants(allowed map[string][]string) *fake.Clientset {
	var grants atomic.Pointer[map[string][]string]
	grants.Store(&allowed)
	return toolsetGrantsFrom(&grants)
}

// toolsetGrantsFrom answers SubjectAccessReviews from grants as they are at each review.
func toolsetGrantsFrom(grants *atomic.Pointer[map[string][]string]) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		a := sar.Spec.ResourceAttributes
		ok := a.Verb == gateway.UseVerb && a.Group == mcpv1alpha1.GroupVersion.Group && a.Namespace == namespace
		sar.Status.Allowed = ok && slices.Contains((*grants.Load())[sar.Spec.User], a.Resource+"/"+a.Name)
		return true, sar, nil
	})
	return cs
}

func TestToolsetClientsHearOfRevokedAccess(t *testing.T) {
	var grants atomic.Pointer[map[string][]string]
	grants.Store(&map[string][]string{"agent": {"mcptoolsets/support-agent", "mcpservers/notes", "mcpservers/tickets"}})
	sar := toolsetGrantsFrom(&grants)
	h := newToolsetHarness(t, func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "agent"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
		o.AccessTTL = 200 * time.Millisecond
	})
	changed := make(chan struct{}, 16)
	cs, err := h.connect(callerToken, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(t, cs); !slices.Contains(got, "t_create_ticket") {
		t.Fatalf("tools = %v, want the tickets tools while allowed", got)
	}
	drain(changed)

	// The Role that granted tickets is gone: the connected client hears of it, and the
	// tools are neither listed nor callable any more.
	grants.Store(&map[string][]string{"agent": {"mcptoolsets/support-agent", "mcpservers/notes"}})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the caller lost use of tickets")
	}
	if got, want := toolNames(t, cs), []string{"notes_echo", "search"}; !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	if _, err := callText(t, cs, "t_create_ticket", nil); err == nil {
		t.Errorf("t_create_ticket is callable after access was revoked")
	}
}

func TestToolsetShowsOnlyTheServersTheCallerMayUse(t *testing.T) {
	sar := toolsetGrants(map[string][]string{
		"agent":    {"mcptoolsets/support-agent", "mcpservers/notes"},
		"outsider": {"mcpservers/notes", "mcpservers/tickets"},
	})
	h := newToolsetHarness(t, func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "agent", "outsider-token": "outsider"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	})

	// Without use on the toolset: 403, whatever the servers allow.
	if resp := initialize(t, h.url(), "outsider-token"); resp.status != http.StatusForbidden {
		t.Errorf("outsider: status %d, want 403", resp.status)
	}
	if resp := initialize(t, h.url(), ""); resp.status != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", resp.status)
	}

	cs, err := h.connect(callerToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := toolNames(t, cs), []string{"notes_echo", "search"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want only notes' %v", got, want)
	}
	if text, err := callText(t, cs, "notes_echo", map[string]any{"text": "hi"}); err != nil || text != "hi" {
		t.Errorf("notes_echo = %q, %v", text, err)
	}
	if _, err := callText(t, cs, "t_create_ticket", nil); err == nil {
		t.Errorf("t_create_ticket was callable without use on mcpservers/tickets")
	}
	if h.tickets.calls("tools/call") != 0 {
		t.Errorf("tickets received a tools/call")
	}
}

func TestToolsetClientsHearOfChangedTools(t *testing.T) {
	h := newToolsetHarness(t, nil)
	changed := make(chan struct{}, 16)
	cs, err := h.connect("", &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	toolNames(t, cs)
	waitFor := func(what string, want func([]string) bool) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, what, func() error {
			select {
			case <-changed:
			default:
			}
			if names := toolNames(t, cs); !want(names) {
				return fmt.Errorf("tools %v", names)
			}
			return nil
		})
	}

	// A tool added on an origin reaches the client.
	drain(changed)
	mcp.AddTool(h.notes.mcp, &mcp.Tool{Name: "archive", Description: "Archives a note."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "archived"}}}, nil, nil
		})
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after an origin added a tool")
	}
	waitFor("notes_archive to be listed", func(n []string) bool { return slices.Contains(n, "notes_archive") })
	if text, err := callText(t, cs, "notes_archive", nil); err != nil || text != "archived" {
		t.Errorf("notes_archive = %q, %v", text, err)
	}

	// A change of the toolset reaches the client too.
	drain(changed)
	updated := h.toolset.DeepCopy()
	updated.Spec.Tools.Deny = append(updated.Spec.Tools.Deny, "t_*")
	h.gw.UpdateToolset(updated)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the toolset changed")
	}
	waitFor("the tickets tools to be gone", func(n []string) bool { return !slices.Contains(n, "t_create_ticket") })
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func TestToolsetSearchModeFindsAndCallsTools(t *testing.T) {
	h := newToolsetHarness(t, nil)
	// 1,000 exposed tools in all: notes' and tickets' own, a GitHub-like create_issue,
	// tools that share one of its words, and filler.
	add := func(name, description string) {
		mcp.AddTool(h.notes.mcp, &mcp.Tool{Name: name, Description: description},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " done"}}}, nil, nil
			})
	}
	add("create_issue", "Creates an issue in a GitHub repository.")
	add("list_issues", "Lists the issues of a GitHub repository.")
	add("create_note", "Creates a note.")
	add("issue_report", "Reports on a repository.")
	for i := range 992 {
		add(fmt.Sprintf("tool_%04d", i), fmt.Sprintf("Does task number %d of the backlog.", i))
	}
	ts := h.toolset.DeepCopy()
	ts.Spec.Discovery = mcpv1alpha1.ToolsetDiscoverySearch
	h.gw.UpdateToolset(ts)

	cs, err := h.connect("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := toolNames(t, cs), []string{"call_tool", "find_tools"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "find_tools", Arguments: map[string]any{"query": "create issue", "limit": 5}})
	if err != nil || res.IsError {
		t.Fatalf("find_tools: %v %+v", err, res)
	}
	found, _ := res.StructuredContent.(map[string]any)["tools"].([]any)
	if len(found) == 0 {
		t.Fatalf("find_tools found nothing: %+v", res.StructuredContent)
	}
	first, _ := found[0].(map[string]any)
	if first["name"] != "notes_create_issue" {
		t.Errorf("find_tools(create issue) ranks %v first, want notes_create_issue; all: %v", first["name"], found)
	}
	if first["inputSchema"] == nil {
		t.Errorf("find_tools gives no input schema: %v", first)
	}
	// Filler matches neither word; denied tools are never found.
	for _, f := range found {
		if name := f.(map[string]any)["name"].(string); strings.HasPrefix(name, "notes_tool_") || strings.Contains(name, "delete") {
			t.Errorf("find_tools(create issue) found %s", name)
		}
	}

	if text, err := callText(t, cs, "call_tool", map[string]any{"name": "notes_create_issue", "arguments": map[string]any{}}); err != nil || text != "create_issue done" {
		t.Errorf("call_tool(notes_create_issue) = %q, %v", text, err)
	}
	if text, err := callText(t, cs, "call_tool", map[string]any{"name": "notes_echo", "arguments": map[string]any{"text": "hi"}}); err != nil || text != "hi" {
		t.Errorf("call_tool(notes_echo) = %q, %v", text, err)
	}
	// call_tool honours the same filters: a denied tool is unknown, and so is a direct
	// call of an exposed tool that is not listed.
	for _, name := range []string{"notes_delete_all", "delete_all"} {
		if _, err := callText(t, cs, "call_tool", map[string]any{"name": name}); err == nil {
			t.Errorf("call_tool(%s) succeeded", name)
		}
	}
	if _, err := callText(t, cs, "notes_echo", map[string]any{"text": "hi"}); err == nil {
		t.Errorf("notes_echo is callable directly in Search mode")
	}
	if h.notes.calls("tools/call") != 2 {
		t.Errorf("notes received %d tools/call, want 2", h.notes.calls("tools/call"))
	}
}

// A toolset session whose initialize fails is ended at once, instead of holding its slot
// of --gateway-max-sessions until the idle timeout.
func TestToolsetSessionThatNeverInitializedIsEnded(t *testing.T) {
	h := newToolsetHarness(t, nil)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":"not initialize params"}`
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.url(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Transport: bearer{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(answer), `"error"`) {
		t.Fatalf("a malformed initialize was answered %d %q, want a JSON-RPC error", resp.StatusCode, answer)
	}
	testutil.Eventually(t, 10*time.Second, "the uninitialized session to end", func() error {
		families, err := h.metrics.Gather()
		if err != nil {
			return err
		}
		for _, f := range families {
			if f.GetName() == "switchboard_gateway_toolset_sessions" && f.GetMetric()[0].GetGauge().GetValue() != 0 {
				return fmt.Errorf("%v open toolset sessions", f.GetMetric()[0].GetGauge().GetValue())
			}
		}
		return nil
	})
}

// A toolset's upstream sessions count against their server's spec.gateway.maxSessions,
// as the server endpoint's do: a toolset cannot open more sessions to a server than
// the server allows.
func TestToolsetUpstreamsCountAgainstTheServersSessionLimit(t *testing.T) {
	h := newToolsetHarness(t, nil)
	notes := readyServer(connector.Key{Namespace: namespace, Name: "notes"})
	notes.Labels = map[string]string{"app": "notes"}
	notes.Spec.Gateway = &mcpv1alpha1.GatewaySpec{MaxSessions: 1}
	h.gw.Update(notes)

	first, err := h.connect("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if text, err := callText(t, first, "notes_echo", map[string]any{"text": "one"}); err != nil || text != "one" {
		t.Fatalf("first session: notes_echo = %q, %v", text, err)
	}
	inits := h.notes.calls("initialize")
	second, err := h.connect("", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Past the limit the second session reaches no notes session: its tools are not
	// listed, so not callable, and notes sees no second initialize.
	if _, err := callText(t, second, "notes_echo", map[string]any{"text": "two"}); err == nil {
		t.Error("the second session called notes past the server's limit of 1 session")
	}
	if got := h.notes.calls("initialize"); got != inits {
		t.Errorf("notes saw %d more initializes past its limit of 1 session", got-inits)
	}
	// Once the first session ends, its slot is the second's.
	_ = first.Close()
	testutil.Eventually(t, 10*time.Second, "the second session to reach notes", func() error {
		text, err := callText(t, second, "notes_echo", map[string]any{"text": "two"})
		if err != nil || text != "two" {
			return fmt.Errorf("notes_echo = %q, %w", text, err)
		}
		return nil
	})
}
