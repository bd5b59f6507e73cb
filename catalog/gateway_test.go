package catalog_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/catalog"
)

// Deadlines the catalogue's own routes get in these tests, and how long the fake gateway
// streams: several times longer.
const (
	shortDeadline = 200 * time.Millisecond
	ticks         = 10
	tickEvery     = 80 * time.Millisecond
)

// fakeGateway streams ticks on every request and records the paths it was given and
// whether they carried a token.
type fakeGateway struct {
	mu    sync.Mutex
	paths []string
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.paths = append(g.paths, r.URL.Path)
	g.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i := range ticks {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(tickEvery):
		}
		if _, err := fmt.Fprintf(w, "data: tick %d\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

func (g *fakeGateway) seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.paths)
}

// A gateway stream on the catalogue's address lasts as long as the gateway keeps it
// open, even on a connection a catalogue request used first, and the gateway gets its
// requests without the catalogue's authentication in the way.
func TestGatewayStreamsOutlastCatalogueDeadlines(t *testing.T) {
	gw := &fakeGateway{}
	c := startCatalogBeside(t, catalog.AuthTokenReview, gw, catalog.WithRequestTimeouts(shortDeadline, shortDeadline))
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(client.CloseIdleConnections)

	get := func(path string) (*http.Response, bool) {
		t.Helper()
		reused := false
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
		ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), 10*time.Second)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp, reused
	}

	// A catalogue request first: it sets its deadlines on the connection.
	resp, _ := get("/api/v1/openapi.json")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("openapi.json: %d", resp.StatusCode)
	}

	path := "/mcp/namespaces/team-a/servers/docs"
	start := time.Now()
	resp, reused := get(path)
	if !reused {
		t.Error("the gateway request did not reuse the catalogue request's connection; the test proves less")
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("gateway without a token: %d, want the gateway's own 200 (the catalogue must not authenticate for it)", resp.StatusCode)
	}
	var got int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: tick") {
			got++
		}
	}
	resp.Body.Close()
	if got != ticks || sc.Err() != nil {
		t.Errorf("gateway stream cut after %d of %d ticks, %v in (deadline %v): %v", got, ticks,
			time.Since(start).Round(time.Millisecond), shortDeadline, sc.Err())
	}

	// Toolsets are the gateway's too; the catalogue keeps /mcp and /api/v1.
	resp, _ = get("/mcp/namespaces/team-a/toolsets/research")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for _, own := range []string{"/mcp", "/api/v1/servers", "/mcp/namespaces"} {
		resp, _ = get(own)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s without a token: %d, want the catalogue's own 401 or 404", own, resp.StatusCode)
		}
	}
	if want := []string{path, "/mcp/namespaces/team-a/toolsets/research"}; !slices.Equal(gw.seen(), want) {
		t.Errorf("gateway was given %q, want %q", gw.seen(), want)
	}
}

// A client that stalls halfway through a request to one of the catalogue's own routes is
// cut off at the route's read deadline, gateway or not.
func TestCatalogueRoutesKeepTheirDeadlines(t *testing.T) {
	c := startCatalogBeside(t, catalog.AuthNone, &fakeGateway{}, catalog.WithRequestTimeouts(shortDeadline, shortDeadline))
	conn, err := net.Dial("tcp", strings.TrimPrefix(c.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	// Promise a body and send only its first byte.
	_, err = io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: catalogue\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// The server answers the broken request or closes the connection; either ends it.
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a stalled request to /mcp was still open after %v; its read deadline is %v", time.Since(start).Round(time.Millisecond), shortDeadline)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("a stalled request to /mcp took %v to be cut, deadline %v", elapsed.Round(time.Millisecond), shortDeadline)
	}
}
