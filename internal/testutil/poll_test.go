package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	calls := 0
	Eventually(t, time.Minute, "the third call", func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestEventuallyFailsWithTheLastReason(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine, as it ends a test
		defer close(done)
		Eventually(rec, 50*time.Millisecond, "a server to answer", func() error {
			return errors.New("connection refused")
		})
	}()
	<-done
	if !strings.Contains(rec.fatal, "a server to answer") || !strings.Contains(rec.fatal, "connection refused") {
		t.Errorf("failure message %q names neither what was awaited nor why it failed", rec.fatal)
	}
}

func TestConsistentlyChecksForTheWholeDuration(t *testing.T) {
	t.Parallel()
	calls := 0
	start := time.Now()
	Consistently(t, 100*time.Millisecond, "the condition", func() error {
		calls++
		return nil
	})
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Errorf("returned after %s, before the duration passed", took)
	}
	if calls < 2 {
		t.Errorf("cond called %d times, want it checked throughout", calls)
	}
}

func TestConsistentlyFailsAtTheFirstLapse(t *testing.T) {
	t.Parallel()
	rec := &recordingTB{TB: t}
	calls := 0
	done := make(chan struct{})
	go func() { // Fatalf ends the goroutine, as it ends a test
		defer close(done)
		Consistently(rec, time.Minute, "no second token request", func() error {
			calls++
			if calls == 3 {
				return errors.New("2 token requests")
			}
			return nil
		})
	}()
	<-done
	if calls != 3 {
		t.Errorf("cond called %d times, want it to stop at the third, which failed", calls)
	}
	if !strings.Contains(rec.fatal, "no second token request") || !strings.Contains(rec.fatal, "2 token requests") {
		t.Errorf("failure message %q names neither what should have held nor why it did not", rec.fatal)
	}
}

// recordingTB captures Fatalf instead of failing the test.
type recordingTB struct {
	testing.TB
	fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
