package connector

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// A server whose address refuses connections for a moment after it became available (a
// Service whose new endpoint kube-proxy has not programmed yet) is connected to as soon
// as it listens: the session stays Connecting, nothing reports it Down, and no backoff
// (an hour here) stands between.
func TestARefusedFirstConnectIsTriedAgainAtOnce(t *testing.T) {
	endpoint := closedPortURL(t)
	var logs syncBuffer
	p := testPool(t, func(o *Options) {
		o.InitialBackoff, o.MaxBackoff = time.Hour, time.Hour
		o.Logger = funcr.New(logs.write, funcr.Options{})
	})
	key := Key{Namespace: "ns", Name: "fresh"}
	p.Ensure(key, fastConfig(endpoint))

	// Refused for a while, then listening on the same address.
	time.Sleep(300 * time.Millisecond)
	if snap, _ := p.Snapshot(key); snap.State == StateDown {
		t.Fatalf("refused connections within the grace reported the session Down: %v", snap.LastError)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: statelessHandler(newServer(1, nil)), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	waitFor(t, p, key, "Ready", func(s Snapshot) bool { return s.State == StateReady })
	if strings.Contains(logs.String(), "Session down") {
		t.Fatalf("a refusal within the grace was logged as a failure:\n%s", logs.String())
	}
}

// A server that goes on refusing past the grace is reported Down with the reason.
func TestAServerThatKeepsRefusingIsReportedDown(t *testing.T) {
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "refusing"}
	start := time.Now()
	p.Ensure(key, fastConfig(closedPortURL(t)))
	snap := waitFor(t, p, key, "Down with ConnectionRefused", func(s Snapshot) bool {
		return s.State == StateDown && s.LastError != nil && s.LastError.Reason == ReasonConnectionRefused
	})
	if took := time.Since(start); took < refusedAtFirstGrace {
		t.Fatalf("reported Down after %s, within the grace of %s", took, refusedAtFirstGrace)
	}
	if !snap.LastError.Transient {
		t.Fatal("a refused connection should be transient")
	}
}
