package mcphttp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// logNotification is a notifications/message carrying text, about size bytes of params.
func logNotification(text string, size int) *jsonrpc.Request {
	if pad := size - len(text); pad > 0 {
		text += strings.Repeat("x", pad)
	}
	params, _ := json.Marshal(map[string]any{"level": "info", "data": text})
	return &jsonrpc.Request{Method: "notifications/message", Params: params}
}

// Messages a client's stream cannot take yet wait within a byte budget: a server that
// sends message after message of several MiB to a client that has not opened its stream
// pins at most the budget, and what fits still arrives, in order, once the stream opens.
func TestRedeliveryHoldsAtMostItsByteBudget(t *testing.T) {
	const budget = maxUndeliveredBytes

	transport := &mcp.StreamableServerTransport{SessionID: "session-1"}
	conn, err := transport.Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	r := NewRedelivery(conn, done, logr.Discard())

	// What the relay does with each message of the server: write it to the client, and
	// hand what the client refused to the Redelivery. Large and small messages alternate;
	// fewer than the count limit, so only the byte budget can turn any away.
	var sent []string
	for i := range 8 {
		for _, msg := range []*jsonrpc.Request{
			logNotification(fmt.Sprintf("large-%d", i), 2<<20),
			logNotification(fmt.Sprintf("small-%d", i), 16<<10),
		} {
			if err := conn.Write(t.Context(), msg); err == nil {
				t.Fatal("the client took a message before opening its stream")
			}
			r.Add(msg)
			if held := r.held.Load(); held > budget {
				t.Fatalf("after queueing %s, %d bytes wait; want at most %d", sent, held, budget)
			}
		}
		sent = append(sent, fmt.Sprintf("large-%d", i), fmt.Sprintf("small-%d", i))
	}
	marker := logNotification("marker", 0)
	if conn.Write(t.Context(), marker) == nil {
		t.Fatal("the client took a message before opening its stream")
	}
	r.Add(marker)

	// The client opens its stream and reads up to the marker, the last message queued.
	front := httptest.NewServer(transport)
	t.Cleanup(front.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, front.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", "session-1")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("opening the stream: %s", resp.Status)
	}
	events := bufio.NewReader(resp.Body)
	var delivered int
	var arrived []string
	for {
		line, err := events.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended before the last message queued arrived: %v", err)
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if strings.Contains(data, `"data":"marker"`) {
			break
		}
		delivered += len(data)
		var msg struct {
			Params struct {
				Data string `json:"data"`
			} `json:"params"`
		}
		if err := json.Unmarshal([]byte(data), &msg); err != nil {
			t.Fatalf("a message on the stream: %v", err)
		}
		arrived = append(arrived, strings.TrimRight(msg.Params.Data, "x"))
	}
	if delivered > budget {
		t.Errorf("%d MiB of messages waited for the client's stream; want at most the budget of %d MiB (arrived: %q)",
			delivered>>20, budget>>20, arrived)
	}
	t.Logf("arrived: %q", arrived)
	// Whatever was dropped, what arrived is in the order it was sent.
	next := 0
	for _, name := range arrived {
		for next < len(sent) && sent[next] != name {
			next++
		}
		if next == len(sent) {
			t.Errorf("messages arrived out of order: %q", arrived)
			break
		}
	}
}
