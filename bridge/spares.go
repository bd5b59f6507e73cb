package bridge

import "sync"

// spares keeps Options.WarmProcesses subprocesses started ahead of the sessions that will
// take them, so that a new session does not wait for the server to boot (a Node.js
// server spends a few hundred milliseconds loading its modules). A spare is only
// started: the session that takes it sends initialize. Spares are in addition to
// Options.MaxSessions.
type spares struct {
	b    *Bridge
	want int

	mu       sync.Mutex
	ready    []*process // started, oldest first
	starting int        // being started by refill
	closed   bool
	wg       sync.WaitGroup // one per refill goroutine
}

func newSpares(b *Bridge, want int) *spares {
	sp := &spares{b: b, want: want}
	sp.refill()
	return sp
}

// take returns a spare that is still running, or starts a process now when there is
// none, and starts replacing what it took.
func (sp *spares) take() (*process, error) {
	sp.mu.Lock()
	var proc *process
	var dead []*process
	for len(sp.ready) > 0 && proc == nil {
		proc, sp.ready = sp.ready[0], sp.ready[1:]
		if proc.hasExited() {
			// It died while it waited: a session would only see it exit.
			dead = append(dead, proc)
			proc = nil
		}
	}
	sp.mu.Unlock()
	for _, d := range dead {
		sp.b.log.Info("A warm server process exited before a session took it", "pid", d.pid, "exit", d.exitError().Error())
		sp.discard(d) // quick: it has exited
	}
	sp.refill()
	if proc != nil {
		return proc, nil
	}
	return sp.b.startProcess()
}

// refill starts processes until want are ready or starting.
func (sp *spares) refill() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for !sp.closed && len(sp.ready)+sp.starting < sp.want {
		sp.starting++
		sp.wg.Go(func() {
			proc, err := sp.b.startProcess()
			sp.mu.Lock()
			sp.starting--
			closed := sp.closed
			if err == nil && !closed {
				sp.ready = append(sp.ready, proc)
			}
			sp.mu.Unlock()
			switch {
			case err != nil:
				// The session that needs a process will start one and report the error.
				sp.b.log.Error(err, "Could not start a warm server process")
			case closed:
				sp.discard(proc)
			}
		})
	}
}

// close stops every spare and waits until each is reaped.
func (sp *spares) close() {
	sp.mu.Lock()
	sp.closed = true
	ready := sp.ready
	sp.ready = nil
	sp.mu.Unlock()
	var wg sync.WaitGroup
	for _, proc := range ready {
		wg.Go(func() { sp.discard(proc) })
	}
	wg.Wait()
	sp.wg.Wait()
}

// discard stops a spare that no session will use.
func (sp *spares) discard(proc *process) {
	if _, err := proc.shutdown(sp.b.opts.GracePeriod); err != nil {
		sp.b.log.Error(err, "Could not stop a warm server process")
	}
}
