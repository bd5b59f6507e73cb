package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"
)

// runDrain is the preStop hook of stdio server pods: it asks the bridge at URL to drain
// (its answers outside sessions close their connections, so clients' next requests go
// to a pod that stays) and then waits --for, the time the endpoints controller and
// kube-proxy take to take the pod out of its Service, before the kubelet sends SIGTERM.
// A bridge that cannot be asked is no reason to cut the wait short: the wait is for the
// Service, and it happens either way.
func runDrain(args []string) int {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	wait := fs.Duration("for", 5*time.Second, "how long to wait after asking, before returning")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: switchboard drain [--for D] URL\n\nAsks the bridge at URL (its /drain) to drain, then waits (the preStop hook of stdio server pods).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 || *wait < 0 {
		fs.Usage()
		return 2
	}
	target, err := url.Parse(fs.Arg(0))
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		fmt.Fprintf(os.Stderr, "switchboard drain: %q is not an http or https URL\n", fs.Arg(0))
		return 2
	}
	deadline := time.Now().Add(*wait)
	if err := askToDrain(target.String()); err != nil {
		fmt.Fprintf(os.Stderr, "switchboard drain: %s: %v; waiting anyway\n", target.Redacted(), err)
	}
	time.Sleep(time.Until(deadline))
	return 0
}

// askToDrain posts to url and returns nil when it was answered 200 OK.
func askToDrain(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
