package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestAwaitReturnsOnceTheURLAnswers(t *testing.T) {
	// A server that listens only after a while and then answers 503 before 200, as a
	// bridge does between starting and serving.
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := listener.Addr().String()
	_ = listener.Close()
	var asked atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})}
	go func() {
		time.Sleep(100 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return
		}
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := await(ctx, "http://"+addr+"/healthz"); err != nil {
		t.Fatalf("await: %v", err)
	}
	if got := asked.Load(); got != 3 {
		t.Fatalf("the server was asked %d times, want 3 (two 503s, then 200)", got)
	}
}

func TestAwaitGivesUpWithTheLastAnswer(t *testing.T) {
	// await asks again only once it has read an answer, so the third request means two
	// 503s were read: the end comes while the third is on its way, and cuts it short.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if asked.Add(1) == 3 {
			cancel()
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	err := await(ctx, srv.URL)
	if err == nil || err.Error() != "answered 503 Service Unavailable" {
		t.Fatalf("await = %v, want the last answer", err)
	}
	if code := runAwait([]string{"--timeout", "200ms", srv.URL}); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
}

// A request the end cuts short says so without the URL: the URL is named once, by
// runAwait, without its query.
func TestAwaitErrorsDoNotRepeatTheURL(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { cancel() }))
	t.Cleanup(srv.Close)
	err := await(ctx, srv.URL+"/healthz?token=s3cret")
	if err == nil || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), srv.URL) {
		t.Errorf("await = %v; want the failure without the URL", err)
	}
}

func TestAwaitRefusesWhatIsNotAURL(t *testing.T) {
	for _, args := range [][]string{{}, {"localhost:8080"}, {"file:///etc/passwd"}, {"a", "b"}} {
		if code := runAwait(args); code != 2 {
			t.Errorf("await %q: exit code %d, want 2", args, code)
		}
	}
}
