package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// appOrigin is a go-sdk server with resources, a template, a prompt with completions,
// subscriptions and an MCP App: a tool whose _meta.ui.resourceUri names a ui://
// resource. Two of them serve the same URIs with different contents.
type appOrigin struct {
	name   string
	server *mcp.Server
	url    string

	mu         sync.Mutex
	reads      []string // URIs read, as the origin received them
	subscribed []string // URIs subscribed to, as the origin received them
}

func startAppOrigin(t *testing.T, name string) *appOrigin {
	o := &appOrigin{name: name}
	o.server = mcp.NewServer(&mcp.Implementation{Name: name + "-server", Version: "1"}, &mcp.ServerOptions{
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{
				Values: []string{name + "-" + req.Params.Ref.Type + "-" + req.Params.Argument.Value}}}, nil
		},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			o.mu.Lock()
			o.subscribed = append(o.subscribed, req.Params.URI)
			o.mu.Unlock()
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	read := func(text, mime string) mcp.ResourceHandler {
		return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			o.mu.Lock()
			o.reads = append(o.reads, req.Params.URI)
			o.mu.Unlock()
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: mime, Text: text + " of " + req.Params.URI}}}, nil
		}
	}
	o.server.AddResource(&mcp.Resource{URI: "notes://readme", Name: "readme", MIMEType: "text/plain"}, read(name+" readme", "text/plain"))
	o.server.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "notes://pages/{page}", Name: "page"}, read(name+" page", "text/plain"))
	o.server.AddResource(&mcp.Resource{URI: "ui://dashboard/app.html", Name: "dashboard", MIMEType: "text/html;profile=mcp-app"},
		read("<p>"+name+" dashboard</p>", "text/html;profile=mcp-app"))
	o.server.AddPrompt(&mcp.Prompt{Name: "summarize", Arguments: []*mcp.PromptArgument{{Name: "topic", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: name + " summarizes " + req.Params.Arguments["topic"]}},
				{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "notes://readme", Text: "readme"}}},
			}}, nil
		})
	o.server.AddTool(&mcp.Tool{Name: "show_dashboard", InputSchema: map[string]any{"type": "object"},
		Meta: mcp.Meta{"ui": map[string]any{"resourceUri": "ui://dashboard/app.html"}}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "notes://readme", Name: "readme"}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return o.server }, nil))
	t.Cleanup(srv.Close)
	o.url = srv.URL
	return o
}

func (o *appOrigin) subscribedURIs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.subscribed)
}

func (o *appOrigin) readURIs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.reads)
}

// A toolset is a whole MCP server: npm server-everything and two go-sdk servers as
// origins, each origin's resources, templates, prompts, completions, subscriptions and
// MCP App reached through the toolset by a client of either era under the toolset's
// URIs and names; a URI of one origin never reaches another; a caller without use on
// an origin sees none of its resources or prompts; the toolset names itself.
func TestAToolsetIsAWholeServer(t *testing.T) {
	// The origins start first, so that they stop last: the gateway's sessions with
	// them end before their servers close.
	docs, wiki := startAppOrigin(t, "docs"), startAppOrigin(t, "wiki")
	origins := map[string]string{
		"everything": testenv.StartServerEverything(t, "streamableHttp") + "/mcp",
		"docs":       docs.url,
		"wiki":       wiki.url,
	}
	pool, err := connector.NewPool(connector.Options{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sar := toolsetGrants(map[string][]string{
		"agent":    {"mcptoolsets/whole", "mcpservers/everything", "mcpservers/docs", "mcpservers/wiki"},
		"outsider": {"mcptoolsets/whole", "mcpservers/everything", "mcpservers/docs"},
	})
	gw, err := gateway.New(gateway.Options{Pool: pool, NewToolIndex: catalogToolIndex,
		Authenticator: tokens{callerToken: "agent", "outsider-token": "outsider"}, Access: sar.AuthorizationV1().SubjectAccessReviews()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	ensureReadyOrigins(t, pool, gw, origins)
	gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "whole", Generation: 1},
		Spec: mcpv1alpha1.MCPToolsetSpec{
			Description: "Everything, docs and wiki as one server",
			Servers: []mcpv1alpha1.ToolsetServer{
				{Name: "everything", Prefix: ptr.To("e_")}, {Name: "docs", Prefix: ptr.To("d_")}, {Name: "wiki", Prefix: ptr.To("w_")}},
		},
	})
	front := httptest.NewServer(gw.Handler())
	t.Cleanup(front.Close)

	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version+" client", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			updated := make(chan string, 4)
			connect := func(token string) *mcp.ClientSession {
				client := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &mcp.ClientOptions{
					ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
				})
				cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: front.URL + gatewaypath.Toolset(namespace, "whole"),
					HTTPClient: &http.Client{Transport: bearer{token: token}}, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cs.Close() })
				return cs
			}
			cs := connect(callerToken)

			init := cs.InitializeResult()
			if init.ServerInfo == nil || init.ServerInfo.Name != "whole" || init.ServerInfo.Description != "Everything, docs and wiki as one server" {
				t.Errorf("serverInfo %+v; want the toolset's own name and description", init.ServerInfo)
			}
			if c := init.Capabilities; c == nil || c.Resources == nil || !c.Resources.Subscribe || c.Prompts == nil || c.Completions == nil {
				t.Errorf("capabilities %+v; want resources with subscriptions, prompts and completions, which the origins offer", c)
			}

			resources := resourceURIs(ctx, t, cs)
			for _, want := range []string{"switchboard+docs:notes://readme", "switchboard+wiki:notes://readme",
				"ui://switchboard+docs/dashboard/app.html", "ui://switchboard+wiki/dashboard/app.html"} {
				if !slices.Contains(resources, want) {
					t.Errorf("resources/list lacks %s: %v", want, resources)
				}
			}
			if !slices.ContainsFunc(resources, func(u string) bool { return strings.HasPrefix(u, "switchboard+everything:") }) {
				t.Errorf("resources/list lacks server-everything's resources: %v", resources)
			}
			templates := templateURIs(ctx, t, cs)
			if !slices.Contains(templates, "switchboard+docs:notes://pages/{page}") {
				t.Errorf("resources/templates/list lacks docs' template: %v", templates)
			}

			// Each read goes to the origin its URI names, and comes back under the
			// toolset's URI.
			for uri, want := range map[string]string{
				"switchboard+docs:notes://readme":          "docs readme of notes://readme",
				"switchboard+wiki:notes://readme":          "wiki readme of notes://readme",
				"switchboard+docs:notes://pages/intro":     "docs page of notes://pages/intro",
				"ui://switchboard+docs/dashboard/app.html": "<p>docs dashboard</p> of ui://dashboard/app.html",
				"ui://switchboard+wiki/dashboard/app.html": "<p>wiki dashboard</p> of ui://dashboard/app.html",
			} {
				res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != want || res.Contents[0].URI != uri {
					t.Errorf("reading %s = %+v, %v; want %q under that URI", uri, res, err, want)
				}
			}
			everything := slices.IndexFunc(resources, func(u string) bool { return strings.HasPrefix(u, "switchboard+everything:") })
			if everything >= 0 {
				if res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: resources[everything]}); err != nil || len(res.Contents) == 0 {
					t.Errorf("reading server-everything's %s = %v", resources[everything], err)
				}
			}
			// A URI no origin serves under that name reaches none.
			before := len(docs.readURIs()) + len(wiki.readURIs())
			for _, uri := range []string{"notes://readme", "switchboard+docs:notes://secret", "switchboard+nobody:notes://readme", "switchboard+:x"} {
				if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
					t.Errorf("reading %s succeeded; want it refused", uri)
				}
			}
			if after := len(docs.readURIs()) + len(wiki.readURIs()); after != before {
				t.Errorf("refused reads reached an origin: docs %v, wiki %v", docs.readURIs(), wiki.readURIs())
			}
			for _, uri := range docs.readURIs() {
				if strings.Contains(uri, "switchboard") {
					t.Errorf("docs received the toolset's URI %s, not its own", uri)
				}
			}

			// The MCP App: each origin's tool names its own app under the toolset's URI.
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			apps := 0
			for _, tool := range tools.Tools {
				if tool.Name != "d_show_dashboard" && tool.Name != "w_show_dashboard" {
					continue
				}
				apps++
				ui, _ := tool.Meta["ui"].(map[string]any)
				want := "ui://switchboard+" + map[string]string{"d_": "docs", "w_": "wiki"}[tool.Name[:2]] + "/dashboard/app.html"
				if ui == nil || ui["resourceUri"] != want {
					t.Errorf("%s names the app %v; want %s", tool.Name, tool.Meta, want)
				}
			}
			if apps != 2 {
				t.Errorf("tools/list has %d of d_show_dashboard and w_show_dashboard; want both", apps)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "w_show_dashboard"})
			if err != nil || len(res.Content) != 1 {
				t.Fatalf("w_show_dashboard = %v", err)
			}
			if link, ok := res.Content[0].(*mcp.ResourceLink); !ok || link.URI != "switchboard+wiki:notes://readme" {
				t.Errorf("the tool's resource link is %+v; want the toolset's URI of wiki's readme", res.Content[0])
			}

			// Prompts and completions, by the toolset's names.
			got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "w_summarize", Arguments: map[string]string{"topic": "gateways"}})
			if err != nil || len(got.Messages) != 2 {
				t.Fatalf("w_summarize = %v", err)
			}
			if text, _ := got.Messages[0].Content.(*mcp.TextContent); text == nil || text.Text != "wiki summarizes gateways" {
				t.Errorf("w_summarize said %+v", got.Messages[0].Content)
			}
			if embedded, _ := got.Messages[1].Content.(*mcp.EmbeddedResource); embedded == nil || embedded.Resource.URI != "switchboard+wiki:notes://readme" {
				t.Errorf("w_summarize embeds %+v; want the toolset's URI", got.Messages[1].Content)
			}
			prompts, err := cs.ListPrompts(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(prompts.Prompts, func(p *mcp.Prompt) bool { return p.Name == "e_completable-prompt" }) {
				t.Errorf("prompts/list lacks server-everything's completable-prompt")
			}
			// server-everything's own prompt, its completions and a template of its own.
			if got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "e_simple-prompt"}); err != nil || len(got.Messages) == 0 {
				t.Errorf("e_simple-prompt = %v", err)
			}
			c, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "e_completable-prompt"},
				Argument: mcp.CompleteParamsArgument{Name: "department", Value: "Eng"}})
			if err != nil || !slices.Equal(c.Completion.Values, []string{"Engineering"}) {
				t.Errorf("completing server-everything's department = %+v, %v; want Engineering", c, err)
			}
			if !slices.ContainsFunc(templates, func(u string) bool { return strings.HasPrefix(u, "switchboard+everything:") }) {
				t.Errorf("resources/templates/list lacks server-everything's templates: %v", templates)
			}
			for ref, want := range map[*mcp.CompleteReference]string{
				{Type: "ref/prompt", Name: "d_summarize"}:                            "docs-ref/prompt-ga",
				{Type: "ref/resource", URI: "switchboard+wiki:notes://pages/{page}"}: "wiki-ref/resource-ga",
			} {
				c, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: "topic", Value: "ga"}})
				if err != nil || !slices.Equal(c.Completion.Values, []string{want}) {
					t.Errorf("completing %+v = %+v, %v; want %s", ref, c, err, want)
				}
			}

			// A subscription: the origin's update reaches the client under the
			// toolset's URI.
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "switchboard+docs:notes://readme"}); err != nil {
				t.Fatalf("subscribing: %v", err)
			}
			testutil.Eventually(t, 10*time.Second, "the origin's update to reach the subscriber", func() error {
				_ = docs.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "notes://readme"})
				select {
				case uri := <-updated:
					if uri != "switchboard+docs:notes://readme" {
						return fmt.Errorf("updated %s", uri)
					}
					return nil
				case <-time.After(500 * time.Millisecond):
					return fmt.Errorf("no notification")
				}
			})

			// Each subscription to a session-era origin holds a stream open to it: a
			// session holds a bounded number.
			if version == sessionEra {
				var refused error
				for i := range 40 {
					if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: fmt.Sprintf("switchboard+docs:notes://pages/p%d", i)}); err != nil {
						refused = err
						break
					}
				}
				if refused == nil || !strings.Contains(refused.Error(), "resource subscriptions") {
					t.Errorf("40 subscriptions to one origin: %v; want those beyond 32 refused", refused)
				}
			}

			// spec.resources judges every concrete URI, so a deny glob also guards what
			// a template would match; no origin hears of a refused read.
			guarded := &mcpv1alpha1.MCPToolset{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "whole", Generation: 2},
				Spec: mcpv1alpha1.MCPToolsetSpec{
					Description: "Everything, docs and wiki as one server",
					Servers: []mcpv1alpha1.ToolsetServer{
						{Name: "everything", Prefix: ptr.To("e_")}, {Name: "docs", Prefix: ptr.To("d_")}, {Name: "wiki", Prefix: ptr.To("w_")}},
					Resources: &mcpv1alpha1.ToolsetURIFilter{Deny: []string{"*/pages/private*"}},
				},
			}
			gw.UpdateToolset(guarded)
			readsBefore := len(docs.readURIs())
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "switchboard+docs:notes://pages/private-salaries"}); err == nil {
				t.Errorf("a template read that spec.resources denies succeeded")
			}
			// (A 2026-07-28 client subscribes on a listen stream, whose refusal its
			// Subscribe does not wait for: the origin is what must not hear of it.)
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "switchboard+docs:notes://pages/private-salaries"}); err == nil && version == sessionEra {
				t.Errorf("a subscription that spec.resources denies succeeded")
			}
			if slices.Contains(docs.subscribedURIs(), "notes://pages/private-salaries") {
				t.Errorf("a subscription that spec.resources denies reached docs")
			}
			if got := docs.readURIs(); len(got) != readsBefore {
				t.Errorf("a denied read reached docs: %v", got[readsBefore:])
			}
			unguarded := guarded.DeepCopy()
			unguarded.Generation, unguarded.Spec.Resources = 3, nil
			gw.UpdateToolset(unguarded)

			// A caller without use on wiki sees none of its resources or prompts, and
			// cannot read them by name.
			outsider := connect("outsider-token")
			for _, uri := range resourceURIs(ctx, t, outsider) {
				if strings.Contains(uri, "switchboard+wiki") {
					t.Errorf("the outsider sees wiki's %s", uri)
				}
			}
			op, err := outsider.ListPrompts(ctx, nil)
			if err != nil || slices.ContainsFunc(op.Prompts, func(p *mcp.Prompt) bool { return strings.HasPrefix(p.Name, "w_") }) {
				t.Errorf("the outsider's prompts/list = %v; want none of wiki's", err)
			}
			if _, err := outsider.ReadResource(ctx, &mcp.ReadResourceParams{URI: "switchboard+wiki:notes://readme"}); err == nil {
				t.Errorf("the outsider read wiki's readme")
			}
		})
	}
}

func resourceURIs(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var uris []string
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatalf("resources/list: %v", err)
		}
		uris = append(uris, r.URI)
	}
	return uris
}

func templateURIs(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var uris []string
	for r, err := range cs.ResourceTemplates(ctx, nil) {
		if err != nil {
			t.Fatalf("resources/templates/list: %v", err)
		}
		uris = append(uris, r.URITemplate)
	}
	return uris
}
