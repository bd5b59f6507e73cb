package mcphttp

import (
	"sync"
	"time"
)

// Activity tracks the client requests a session has in flight and reaps the session
// once none has been in flight for its idle timeout. A zero timeout never reaps. After
// Stop (the session is ending) Begin refuses new requests.
type Activity struct {
	timeout time.Duration
	onIdle  func()

	mu       sync.Mutex
	requests int
	lastUsed time.Time   // when the last request began or ended
	timer    *time.Timer // nil when reaping is off or the activity stopped
	stopped  bool
}

// NewActivity starts tracking a new session, which counts as idle from now on: onIdle
// runs once, on a goroutine of its own, when it has been idle for timeout.
func NewActivity(timeout time.Duration, onIdle func()) *Activity {
	a := &Activity{timeout: timeout, onIdle: onIdle, lastUsed: time.Now()}
	if timeout > 0 {
		a.timer = time.AfterFunc(timeout, a.fire)
	}
	return a
}

// Begin marks a request in flight, which holds off reaping. It reports false once the
// activity stopped.
func (a *Activity) Begin() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return false
	}
	if a.requests == 0 && a.timer != nil {
		a.timer.Stop()
	}
	a.requests++
	a.lastUsed = time.Now()
	return true
}

// End marks a request done; the last one in flight restarts the idle timeout.
func (a *Activity) End() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests--
	a.lastUsed = time.Now()
	if a.requests == 0 && a.timer != nil {
		a.timer.Reset(a.timeout)
	}
}

// Stop ends tracking: the session is ending, for whatever reason.
func (a *Activity) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopLocked()
}

func (a *Activity) stopLocked() {
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}

// IdleSince reports when the session last had a request begin or end, and false while a
// request is in flight or once the activity stopped.
func (a *Activity) IdleSince() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastUsed, a.requests == 0 && !a.stopped
}

// StopIfIdle stops the activity, as Stop does, but only while no request is in flight; it
// reports whether it did. From then on Begin refuses, so a session chosen for eviction
// cannot start a request between the choice and its end.
func (a *Activity) StopIfIdle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.requests > 0 || a.stopped {
		return false
	}
	a.stopLocked()
	return true
}

// fire reaps the session unless a request began, or it stopped, since the timer fired.
func (a *Activity) fire() {
	a.mu.Lock()
	if a.requests > 0 || a.stopped {
		a.mu.Unlock()
		return
	}
	a.stopped = true
	a.timer = nil
	a.mu.Unlock()
	a.onIdle()
}
