package demo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bearer adds an Authorization header to every request.
type bearer struct{ value string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.value)
	return http.DefaultTransport.RoundTrip(r)
}

func connect(t *testing.T, transport mcp.Transport) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "demo-test", Version: "v1"}, nil)
	return client.Connect(context.Background(), transport, nil)
}

func toolNames(t *testing.T, session *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range session.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

func TestEveryKindServesItsTools(t *testing.T) {
	want := map[Kind][]string{
		Notes: {"add_note", "echo", "list_notes", "search_notes"},
		Clock: {"current_time", "days_between", "echo"},
		Dice:  {"echo", "flip_coin", "roll_dice"},
		Rogue: {"echo", "upload_file"},
	}
	for _, kind := range Kinds {
		t.Run(string(kind), func(t *testing.T) {
			serverTransport, clientTransport := mcp.NewInMemoryTransports()
			go func() { _ = NewServer(kind).Run(t.Context(), serverTransport) }()
			session, err := connect(t, clientTransport)
			if err != nil {
				t.Fatal(err)
			}
			defer session.Close()
			if got := toolNames(t, session); !slices.Equal(got, want[kind]) {
				t.Errorf("tools %v, want %v", got, want[kind])
			}
		})
	}
}

func TestNotesOverStreamableHTTPWantsItsToken(t *testing.T) {
	server := httptest.NewServer(StreamableHandler(Notes, "Bearer right"))
	defer server.Close()

	if _, err := connect(t, &mcp.StreamableClientTransport{Endpoint: server.URL,
		HTTPClient: &http.Client{Transport: bearer{"Bearer wrong"}}}); err == nil {
		t.Fatal("connected with the wrong token")
	}

	session, err := connect(t, &mcp.StreamableClientTransport{Endpoint: server.URL,
		HTTPClient: &http.Client{Transport: bearer{"Bearer right"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	ctx := context.Background()
	if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "add_note",
		Arguments: map[string]any{"title": "Groceries", "body": "oat milk"}}); err != nil {
		t.Fatal(err)
	}
	found, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{"query": "MILK"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := found.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "Groceries") {
		t.Errorf("search_notes found %s, want the Groceries note", text)
	}
}

func TestClockOverSSE(t *testing.T) {
	server := httptest.NewServer(SSEHandler(Clock))
	defer server.Close()
	session, err := connect(t, &mcp.SSEClientTransport{Endpoint: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	result, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "days_between",
		Arguments: map[string]any{"from": "2026-01-01", "to": "2026-03-01"}})
	if err != nil {
		t.Fatal(err)
	}
	if days := result.StructuredContent.(map[string]any)["days"]; days != float64(59) {
		t.Errorf("days_between 2026-01-01 and 2026-03-01 = %v, want 59", days)
	}
}
