package connector

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkConnect measures connect plus full discovery through the connector against
// the floor, a bare go-sdk client doing initialize (or server/discover) and tools/list,
// on the same server in the same run. Both open a fresh HTTP connection every time, as
// a first connect to a server does. Run with:
//
//	go test -bench=Connect -run='^$' ./connector/
func BenchmarkConnect(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts *mcp.StreamableHTTPOptions
		srv  *mcp.ServerOptions
	}{
		{"stateful-2025-11-25", nil, &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}},
		{"stateless-2026-07-28", &mcp.StreamableHTTPOptions{Stateless: true}, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ts := serveStreamable(b, newServer(20, tc.srv), tc.opts)
			p := testPool(b)
			ctx := context.Background()

			var bare, viaConnector time.Duration
			i := 0
			for b.Loop() {
				start := time.Now()
				closeBare := bareConnect(ctx, b, ts.URL)
				bare += time.Since(start)
				closeBare()

				key := Key{Namespace: "bench", Name: fmt.Sprint(i)}
				i++
				start = time.Now()
				p.Ensure(key, Config{URL: ts.URL})
				waitReadyEvent(b, p, key)
				viaConnector += time.Since(start)
				p.Remove(key)
			}
			n := float64(b.N)
			b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/op")
			b.ReportMetric(float64(viaConnector.Nanoseconds())/n, "connector-ns/op")
			b.ReportMetric(float64(viaConnector)/float64(bare), "ratio")
		})
	}
}

// bareConnect is the floor: go-sdk alone, initialize and one tools/list. It returns
// the close function so closing stays out of the measurement, as it does for the
// connector, whose Remove returns at once.
func bareConnect(ctx context.Context, b *testing.B, url string) (closeSession func()) {
	client := mcp.NewClient(&mcp.Implementation{Name: "bare", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: &http.Transport{}}}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		b.Fatal(err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 20 {
		b.Fatalf("tools/list: %d tools, %v", len(res.Tools), err)
	}
	return func() {
		_ = cs.Close()
		transport.HTTPClient.CloseIdleConnections()
	}
}

// waitReadyEvent waits for the event that announces key is Ready.
func waitReadyEvent(b *testing.B, p *Pool, key Key) {
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev := <-p.Events():
			if ev.Key != key {
				continue
			}
			if snap, _ := p.Snapshot(key); snap.State == StateReady {
				if len(snap.Tools) != 20 {
					b.Fatalf("connector found %d tools", len(snap.Tools))
				}
				return
			}
			if snap, _ := p.Snapshot(key); snap.State == StateDown {
				b.Fatalf("connector failed: %v", snap.LastError)
			}
		case <-timeout:
			b.Fatalf("no Ready event for %s", key)
		}
	}
}
