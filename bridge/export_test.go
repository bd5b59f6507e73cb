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
