package bridge

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
)

// Defaults applied by New to zero-valued Options fields.
const (
	// DefaultMaxSessions is the number of concurrent sessions, and so subprocesses, allowed
	// when Options.MaxSessions is zero.
	DefaultMaxSessions = 4
	// DefaultGracePeriod is how long a subprocess has to exit after its stdin is closed
	// before its process group is terminated, when Options.GracePeriod is zero.
	DefaultGracePeriod = 5 * time.Second
	// DefaultMaxMessageBytes bounds one JSON-RPC message (an HTTP request body or a line
	// on a subprocess's stdout) when Options.MaxMessageBytes is zero. It matches go-sdk's
	// default line limit for stdio.
	DefaultMaxMessageBytes = 16 << 20
)

// SessionMode says how client sessions map onto server processes.
type SessionMode string

const (
	// PerSession runs one subprocess per client session, initialized by that client.
	PerSession SessionMode = "PerSession"
	// Shared runs one long-lived subprocess for every session, initialized once by the
	// bridge without client capabilities (no sampling, elicitation or roots).
	Shared SessionMode = "Shared"
)

// Options configures a Bridge.
type Options struct {
	// Command is the MCP server's argv: Command[0] is looked up in PATH and run once per
	// session with the remaining elements as arguments. Required.
	Command []string
	// Env is the environment of each subprocess; nil means the bridge's own.
	Env []string
	// Dir is the working directory of each subprocess; empty means the bridge's own.
	Dir string

	// SessionMode is PerSession or Shared; empty means PerSession.
	SessionMode SessionMode

	// MaxSessions bounds the concurrent sessions, and in PerSession mode so the running
	// subprocesses. At the
	// limit a new session evicts the least recently used session that has no request in
	// flight (its client gets 404 on its next request and starts a new session); it is
	// refused with HTTP 503 only while every session has a request in flight. An ended
	// session holds its slot until its subprocess has been reaped. Zero means
	// DefaultMaxSessions.
	MaxSessions int
	// WarmProcesses is how many subprocesses are kept started ahead of new sessions, so
	// that a new session does not wait for the server to boot; they are in addition to
	// MaxSessions. Zero keeps none. Shared mode has its one process and keeps none.
	WarmProcesses int
	// IdleTimeout ends a session, and stops its subprocess, once no client request has
	// been in flight for this long. A standalone SSE stream (a hanging GET) does not count
	// as activity. Zero disables idle reaping.
	IdleTimeout time.Duration
	// GracePeriod is how long a subprocess has to exit after its stdin is closed before
	// SIGTERM goes to its whole process group, and SIGKILL a second later. Zero means
	// DefaultGracePeriod.
	GracePeriod time.Duration
	// MaxMessageBytes bounds one JSON-RPC message in each direction: a longer HTTP request
	// body is refused with 413, a longer line on a subprocess's stdout ends its session.
	// Zero means DefaultMaxMessageBytes.
	MaxMessageBytes int

	// StartupWindow, when positive, makes Serve stop the bridge and return a
	// *CommandError when the first server process the bridge starts (a warm spare, or the
	// process of the first session, of Shared mode or of the sessionless front) cannot be
	// started, or exits on its own within StartupWindow of its start. A command that
	// fails at once (a missing module, a bad flag, a missing library) then ends the
	// bridge, where whoever runs it sees an exit status and the process's stderr in the
	// log, instead of leaving a bridge that looks ready while every session fails. A
	// process the bridge stopped itself (its session ended) does not count. Zero watches
	// nothing.
	StartupWindow time.Duration

	// Logger receives the bridge's structured logs, including each subprocess's stderr.
	// The zero Logger discards them.
	Logger logr.Logger
}

// withDefaults validates o and fills in its defaults.
func (o Options) withDefaults() (Options, error) {
	if len(o.Command) == 0 || o.Command[0] == "" {
		return o, errors.New("no mcp server command given")
	}
	if err := lookPath(o.Command[0]); err != nil {
		return o, err
	}
	if o.MaxSessions < 0 || o.WarmProcesses < 0 || o.IdleTimeout < 0 || o.GracePeriod < 0 || o.MaxMessageBytes < 0 || o.StartupWindow < 0 {
		return o, errors.New("max sessions, warm processes, idle timeout, grace period, max message bytes and startup window must not be negative")
	}
	switch o.SessionMode {
	case "":
		o.SessionMode = PerSession
	case PerSession, Shared:
	default:
		return o, fmt.Errorf("session mode %q: want %s or %s", o.SessionMode, PerSession, Shared)
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.GracePeriod == 0 {
		o.GracePeriod = DefaultGracePeriod
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	return o, nil
}
