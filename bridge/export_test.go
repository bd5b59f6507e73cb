package bridge

import (
	"testing"
	"time"
)

// ShortenHTTPTimeouts sets the header and body read timeouts of bridges served after it
// for the rest of the test, so that a test of a slow client needs no long wait.
func ShortenHTTPTimeouts(t testing.TB, header, body time.Duration) {
	t.Helper()
	oldHeader, oldBody := readHeaderTimeout, bodyReadTimeout
	readHeaderTimeout, bodyReadTimeout = header, body
	t.Cleanup(func() { readHeaderTimeout, bodyReadTimeout = oldHeader, oldBody })
}

// PendingCalls returns how many client calls of the live session id the bridge tracks as
// unanswered, so that a test can wait until a call it sent has arrived.
func (b *Bridge) PendingCalls(id string) int {
	s, _ := b.lookup(id)
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// ShortenSharedWriteTimeout sets how long a write to a shared process's stdin may block,
// for the rest of the test.
func ShortenSharedWriteTimeout(t testing.TB, d time.Duration) {
	t.Helper()
	old := sharedWriteTimeout
	sharedWriteTimeout = d
	t.Cleanup(func() { sharedWriteTimeout = old })
}

// OpenListens returns how many subscriptions/listen streams of sessionless clients the
// bridge holds open.
func (b *Bridge) OpenListens() int { return len(b.stateless.listens) }

// StartupSettled is closed once the verdict on the first process is in (it outlived
// Options.StartupWindow, exited after the bridge stopped it, or failed); nil without a
// window.
func (b *Bridge) StartupSettled() <-chan struct{} {
	if b.startup == nil {
		return nil
	}
	return b.startup.done
}
