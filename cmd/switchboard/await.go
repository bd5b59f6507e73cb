package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/switchboard-mcp/switchboard/connector"
)

// awaitPollInterval is how often await asks again: the bridge listens within
// milliseconds of starting, and every poll is a loopback request.
const awaitPollInterval = 10 * time.Millisecond

// runAwait waits until a URL answers 200 OK. It is the postStart hook of stdio server
// pods: the kubelet counts a container as started, and so (without a readiness probe)
// its pod as Ready, only once the hook has returned, so the pod joins its Service the
// moment its bridge listens, neither before (connections refused) nor a probe period
// after. Exit code 1 when the URL has not answered in time.
func runAwait(args []string) int {
	fs := flag.NewFlagSet("await", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait before giving up")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: switchboard await [--timeout D] URL\n\nWaits until URL answers 200 OK (the postStart hook of stdio server pods).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	target, err := url.Parse(fs.Arg(0))
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		fmt.Fprintf(os.Stderr, "switchboard await: %q is not an http or https URL\n", fs.Arg(0))
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := await(ctx, target.String()); err != nil {
		// The kubelet puts what a failed postStart hook printed into an Event: the URL
		// without userinfo or query, and errors that do not repeat it.
		fmt.Fprintf(os.Stderr, "switchboard await: %s did not answer 200 OK within %s: %v\n", connector.DisplayURL(target.String()), *timeout, err)
		return 1
	}
	return 0
}

// await asks target until it answers 200 OK or ctx ends, and returns the last failure then:
// the server's last answer, not the request that the end cut short, which says only that
// time ran out.
func await(ctx context.Context, target string) error {
	client := &http.Client{Timeout: time.Second}
	var last error
	for {
		err := ask(ctx, client, target)
		if err == nil {
			return nil
		}
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(awaitPollInterval):
		}
	}
}

// ask makes one request to target and returns nil when it was answered 200 OK.
func ask(ctx context.Context, client *http.Client, target string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			return ue.Err // without the URL, which the caller names
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
