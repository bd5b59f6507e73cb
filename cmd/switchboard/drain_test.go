package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestDrainAsksTheBridgeThenWaits(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/drain" {
			asked.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	start := time.Now()
	if code := runDrain([]string{"--for", "300ms", srv.URL + "/drain"}); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("returned after %s, before the 300ms it was to wait", took)
	}
	if asked.Load() != 1 {
		t.Errorf("the bridge was asked %d times, want once", asked.Load())
	}
}

// A bridge that is gone (it crashed, or never listened) does not cut the wait short:
// the wait is for the Service to let the pod go.
func TestDrainWaitsEvenWhenTheBridgeCannotBeAsked(t *testing.T) {
	start := time.Now()
	if code := runDrain([]string{"--for", "300ms", "http://127.0.0.1:1/drain"}); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("returned after %s, before the 300ms it was to wait", took)
	}
	for _, args := range [][]string{{}, {"--for", "-1s", "http://127.0.0.1:1/drain"}, {"127.0.0.1:8080"}} {
		if code := runDrain(args); code != 2 {
			t.Errorf("drain %q: exit code %d, want 2", args, code)
		}
	}
}
