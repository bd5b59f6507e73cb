// Package demo holds the small MCP servers `switchboard dev` runs, so that a newcomer can
// watch Switchboard connect, discover and enforce without anything from the internet.
// Each server is a go-sdk server with a few tools, a resource and a prompt; they differ
// in what they do so the catalogue has something to search.
package demo

import (
	"context"
	"crypto/subtle"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Kind names one of the demo servers.
type Kind string

const (
	// Notes is a note-taking server: add, list and search notes kept in memory.
	Notes Kind = "notes"
	// Clock tells the time and does date arithmetic.
	Clock Kind = "clock"
	// Dice rolls dice and flips coins.
	Dice Kind = "dice"
	// Rogue is the server the dev samples' egress policy keeps Switchboard away from.
	Rogue Kind = "rogue"
)

// Kinds lists every demo server.
var Kinds = []Kind{Notes, Clock, Dice, Rogue}

// ParseKind returns the Kind named s.
func ParseKind(s string) (Kind, error) {
	if k := Kind(s); slices.Contains(Kinds, k) {
		return k, nil
	}
	return "", fmt.Errorf("unknown demo server %q: want one of %v", s, Kinds)
}

// NewServer returns a new MCP server of the given kind. Notes keeps its notes per server
// value, so an HTTP handler that shares one server shares the notes between sessions.
func NewServer(kind Kind) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "switchboard-demo-" + string(kind), Version: "v1"}, nil)
	switch kind {
	case Notes:
		addNotesTools(server)
	case Clock:
		addClockTools(server)
	case Dice:
		addDiceTools(server)
	case Rogue:
		addRogueTools(server)
	}
	addEcho(server)
	server.AddResource(&mcp.Resource{
		URI:         "demo://" + string(kind) + "/about",
		Name:        "about",
		Description: "What this demo server is for.",
		MIMEType:    "text/plain",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
			URI:      req.Params.URI,
			MIMEType: "text/plain",
			Text:     fmt.Sprintf("The %s server is one of the demo servers `switchboard dev` runs on loopback.", kind),
		}}}, nil
	})
	server.AddPrompt(&mcp.Prompt{
		Name:        "try-" + string(kind),
		Description: "Asks the model to try out this server's tools.",
	}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{
			Role:    "user",
			Content: &mcp.TextContent{Text: fmt.Sprintf("Call each tool of the %s server once and tell me what it did.", kind)},
		}}}, nil
	})
	return server
}

// StreamableHandler serves one shared server of the given kind over Streamable HTTP.
// When requiredAuthorization is set, requests whose Authorization header differs get 401,
// as a real hosted server would answer a missing or wrong token.
func StreamableHandler(kind Kind, requiredAuthorization string) http.Handler {
	server := NewServer(kind)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	if requiredAuthorization == "" {
		return handler
	}
	want := []byte(requiredAuthorization)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			http.Error(w, "missing or wrong Authorization header", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	})
}

// SSEHandler serves one shared server of the given kind over the legacy HTTP+SSE
// transport (MCP 2024-11-05).
func SSEHandler(kind Kind) http.Handler {
	server := NewServer(kind)
	return mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil)
}

// ServeStdio serves a server of the given kind on standard input and output until the
// client closes its end or ctx ends.
func ServeStdio(ctx context.Context, kind Kind) error {
	return NewServer(kind).Run(ctx, &mcp.StdioTransport{})
}

type echoInput struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

func addEcho(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Returns the text it is given."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoInput) (*mcp.CallToolResult, any, error) {
			return text(in.Text), nil, nil
		})
}

type noteInput struct {
	Title string `json:"title" jsonschema:"a short title"`
	Body  string `json:"body" jsonschema:"the note's text"`
}

type searchInput struct {
	Query string `json:"query" jsonschema:"words to look for in titles and bodies"`
}

type notesOutput struct {
	Notes []noteInput `json:"notes"`
}

func addNotesTools(server *mcp.Server) {
	var mu sync.Mutex
	var notes []noteInput
	mcp.AddTool(server, &mcp.Tool{Name: "add_note", Description: "Saves a note in the server's memory."},
		func(_ context.Context, _ *mcp.CallToolRequest, in noteInput) (*mcp.CallToolResult, any, error) {
			if strings.TrimSpace(in.Title) == "" {
				return nil, nil, fmt.Errorf("a note needs a title")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(notes) >= 1000 {
				return nil, nil, fmt.Errorf("the demo keeps at most 1000 notes")
			}
			notes = append(notes, in)
			return text(fmt.Sprintf("Saved note %d: %s", len(notes), in.Title)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "list_notes", Description: "Lists every saved note."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, notesOutput, error) {
			mu.Lock()
			defer mu.Unlock()
			return nil, notesOutput{Notes: slices.Clone(notes)}, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "search_notes", Description: "Finds notes whose title or body contains the query."},
		func(_ context.Context, _ *mcp.CallToolRequest, in searchInput) (*mcp.CallToolResult, notesOutput, error) {
			mu.Lock()
			defer mu.Unlock()
			query := strings.ToLower(in.Query)
			out := notesOutput{Notes: []noteInput{}}
			for _, n := range notes {
				if strings.Contains(strings.ToLower(n.Title+" "+n.Body), query) {
					out.Notes = append(out.Notes, n)
				}
			}
			return nil, out, nil
		})
}

type timeInput struct {
	UTCOffsetHours int `json:"utcOffsetHours,omitempty" jsonschema:"hours east of UTC, from -12 to 14; 0 is UTC"`
}

type daysBetweenInput struct {
	From string `json:"from" jsonschema:"a date as YYYY-MM-DD"`
	To   string `json:"to" jsonschema:"a date as YYYY-MM-DD"`
}

type daysBetweenOutput struct {
	Days int `json:"days"`
}

func addClockTools(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{Name: "current_time", Description: "Tells the current time at a UTC offset."},
		func(_ context.Context, _ *mcp.CallToolRequest, in timeInput) (*mcp.CallToolResult, any, error) {
			if in.UTCOffsetHours < -12 || in.UTCOffsetHours > 14 {
				return nil, nil, fmt.Errorf("utcOffsetHours must be between -12 and 14")
			}
			zone := time.FixedZone(fmt.Sprintf("UTC%+d", in.UTCOffsetHours), in.UTCOffsetHours*3600)
			return text(time.Now().In(zone).Format(time.RFC3339)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "days_between", Description: "Counts the days from one date to another."},
		func(_ context.Context, _ *mcp.CallToolRequest, in daysBetweenInput) (*mcp.CallToolResult, daysBetweenOutput, error) {
			from, err := time.Parse(time.DateOnly, in.From)
			if err != nil {
				return nil, daysBetweenOutput{}, fmt.Errorf("from: want YYYY-MM-DD")
			}
			to, err := time.Parse(time.DateOnly, in.To)
			if err != nil {
				return nil, daysBetweenOutput{}, fmt.Errorf("to: want YYYY-MM-DD")
			}
			return nil, daysBetweenOutput{Days: int(to.Sub(from).Hours() / 24)}, nil
		})
}

type rollInput struct {
	Dice  int `json:"dice,omitempty" jsonschema:"how many dice to roll, 1 to 100; default 1"`
	Sides int `json:"sides,omitempty" jsonschema:"sides of each die, 2 to 1000; default 6"`
}

type rollOutput struct {
	Rolls []int `json:"rolls"`
	Total int   `json:"total"`
}

func addDiceTools(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{Name: "roll_dice", Description: "Rolls dice and adds them up."},
		func(_ context.Context, _ *mcp.CallToolRequest, in rollInput) (*mcp.CallToolResult, rollOutput, error) {
			dice, sides := orDefault(in.Dice, 1), orDefault(in.Sides, 6)
			if dice < 1 || dice > 100 || sides < 2 || sides > 1000 {
				return nil, rollOutput{}, fmt.Errorf("dice must be 1 to 100 and sides 2 to 1000")
			}
			out := rollOutput{Rolls: make([]int, dice)}
			for i := range out.Rolls {
				out.Rolls[i] = 1 + rand.IntN(sides) //nolint:gosec // dice, not keys
				out.Total += out.Rolls[i]
			}
			return nil, out, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "flip_coin", Description: "Flips a coin."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text([]string{"heads", "tails"}[rand.IntN(2)]), nil, nil //nolint:gosec // a coin, not a key
		})
}

type uploadInput struct {
	Path string `json:"path" jsonschema:"the file to upload"`
}

// addRogueTools gives the rogue server the kind of tool an egress policy exists to keep
// away from credentials.
func addRogueTools(server *mcp.Server) {
	mcp.AddTool(server, &mcp.Tool{Name: "upload_file", Description: "Uploads any file to a server nobody approved."},
		func(_ context.Context, _ *mcp.CallToolRequest, in uploadInput) (*mcp.CallToolResult, any, error) {
			return text("pretended to upload " + in.Path), nil, nil
		})
}

// orDefault returns v, or def when v is zero (the field was left out).
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
