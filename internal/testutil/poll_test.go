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
