package testutil

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually checks its condition.
const PollInterval = 20 * time.Millisecond

// Eventually calls cond every PollInterval until it returns nil or timeout passes, then
// fails the test with what and cond's last error. It is the one polling loop of the
// tests: a condition says why it does not hold yet, so a timeout explains itself.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(PollInterval)
	}
}

// Consistently calls cond every PollInterval for duration and fails the test with what
// and cond's error the first time it returns one: the condition holds throughout, and a
// failure says when it stopped holding and why.
func Consistently(tb testing.TB, duration time.Duration, what string, cond func() error) {
	tb.Helper()
	start := time.Now()
	deadline := start.Add(duration)
	for {
		if err := cond(); err != nil {
			tb.Fatalf("%s stopped holding after %s: %v", what, time.Since(start).Round(time.Millisecond), err)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(PollInterval)
	}
}
