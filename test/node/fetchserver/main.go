// Command fetchserver is a stdio MCP server for the node's egress tests: its one tool,
// fetch, does an HTTP GET of the url it is given and answers with the status code and the
// first 200 bytes of the body, or with the error (a refused or timed-out dial, say) as a
// tool error, so that a test can see from inside a server's pod what the network lets
// it reach. hack/node-images builds it into an image.
//
// It dials directly, whatever HTTP_PROXY and its kin say: a proxy would answer for
// destinations the pod itself may not reach.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bodyPrefix is how much of the body fetch returns.
const bodyPrefix = 200

// timeout bounds a fetch, dial, redirects and body included.
const timeout = 5 * time.Second

// fetchArgs is the fetch tool's input.
type fetchArgs struct {
	URL string `json:"url" jsonschema:"the http or https URL to GET"`
}

func main() {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	client := &http.Client{Transport: transport, Timeout: timeout}

	srv := mcp.NewServer(&mcp.Implementation{Name: "fetchserver", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "fetch",
		Description: "GETs a URL and returns the status code and the first 200 bytes of the body.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, args fetchArgs) (*mcp.CallToolResult, any, error) {
		text, err := fetch(ctx, client, args.URL)
		if err != nil {
			// go-sdk answers a handler's error as a result with isError set.
			return nil, nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
	})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// fetch GETs url and returns "status N" and the body's first bytes on the next line.
func fetch(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		// The dial's own error, without the URL (and its query) that url.Error adds.
		if uerr, ok := errors.AsType[*neturl.Error](err); ok {
			return "", uerr.Err
		}
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, bodyPrefix))
	if err != nil {
		return "", fmt.Errorf("status %d, reading the body: %w", resp.StatusCode, err)
	}
	return fmt.Sprintf("status %d\n%s", resp.StatusCode, body), nil
}
