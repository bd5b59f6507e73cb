package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// bridgeOptions are the bridge subcommand's flags.
type bridgeOptions struct {
	listen          string
	sessionMode     string
	maxSessions     int
	warmProcesses   int
	idleTimeout     time.Duration
	gracePeriod     time.Duration
	maxMessageBytes int
	startupWindow   time.Duration
	zap             zap.Options
}

func (o *bridgeOptions) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", ":8080",
		"Address the MCP endpoint (/mcp) and the probes (/healthz, /readyz) listen on.")
	fs.StringVar(&o.sessionMode, "session-mode", string(bridge.PerSession),
		"PerSession runs a server process per client session; Shared runs one process for all sessions, initialized once without client capabilities (no sampling, elicitation or roots).")
	fs.IntVar(&o.maxSessions, "max-sessions", bridge.DefaultMaxSessions,
		"Concurrent client sessions (and in PerSession mode server processes). At the limit a new session evicts the least recently used idle one; HTTP 503 only while every session has a request in flight.")
	fs.IntVar(&o.warmProcesses, "warm-processes", 1,
		"Server processes kept started ahead of new sessions (in addition to --max-sessions), so that a new session does not wait for the server to boot; 0 keeps none.")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 2*time.Minute,
		"End a session and stop its process after this long without a client request; 0 never does.")
	fs.DurationVar(&o.gracePeriod, "grace-period", bridge.DefaultGracePeriod,
		"How long a server process has to exit after its stdin is closed before its process group gets SIGTERM (and SIGKILL a second later).")
	fs.IntVar(&o.maxMessageBytes, "max-message-bytes", bridge.DefaultMaxMessageBytes,
		"Largest JSON-RPC message in either direction; a server writing a longer line loses its session.")
	fs.DurationVar(&o.startupWindow, "startup-window", 10*time.Second,
		"Exit with status 1 when the first server process cannot be started or exits on its own within this long of its start (a missing module, a bad flag), after logging its stderr and one line naming the command and how it ended, so that the pod shows the failure instead of a bridge whose every session fails; 0 never does.")
	// Structured JSON logs unless --zap-devel asks for human-readable ones, and no Go
	// stack traces unless --zap-stacktrace-level asks for them: the bridge's log is the
	// server pod's, read by the server's users (and its last lines by the operator, to
	// say why the pod failed), to whom the bridge's own call stack says nothing.
	o.zap.StacktraceLevel = zapcore.PanicLevel
	o.zap.BindFlags(fs)
}

// cannotRun logs, in one line, that the MCP server command cannot run and why, and
// returns the bridge's exit status: 1. It reports false for any other error.
func cannotRun(log logr.Logger, err error) (int, bool) {
	var commandErr *bridge.CommandError
	if !errors.As(err, &commandErr) {
		return 0, false
	}
	log.Error(err, "Cannot run the MCP server", "command", commandErr.Command)
	return 1, true
}

func runBridge(args []string) int {
	var opts bridgeOptions
	fs := flag.NewFlagSet("bridge", flag.ContinueOnError)
	opts.bind(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: switchboard bridge [flags] -- COMMAND [ARGS...]

Serves the stdio MCP server COMMAND over Streamable HTTP at /mcp, running one COMMAND
process per client session (--session-mode PerSession) or one for all sessions
(--session-mode Shared). Metrics are at /metrics. SIGTERM closes every process's stdin,
waits --grace-period, then terminates and kills what is left.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	command := fs.Args()
	if len(command) == 0 {
		fmt.Fprintln(fs.Output(), "switchboard bridge: no MCP server command given after --")
		fs.Usage()
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts.zap)))
	log := ctrl.Log.WithName("bridge")

	b, err := bridge.New(bridge.Options{
		Command:         command,
		SessionMode:     bridge.SessionMode(opts.sessionMode),
		MaxSessions:     opts.maxSessions,
		WarmProcesses:   opts.warmProcesses,
		IdleTimeout:     opts.idleTimeout,
		GracePeriod:     opts.gracePeriod,
		MaxMessageBytes: opts.maxMessageBytes,
		StartupWindow:   opts.startupWindow,
		Logger:          log,
	})
	if code, ok := cannotRun(log, err); ok {
		return code
	}
	if err != nil {
		log.Error(err, "Invalid bridge configuration")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Traces go where the OTEL_* variables of the pod (spec.stdio.env) say, if anywhere.
	provider, err := tracing.Setup(ctx, tracing.Options{ServiceName: "switchboard-bridge", SamplingRatio: -1})
	if err != nil {
		log.Error(err, "Invalid tracing configuration")
		return 2
	}
	defer shutdownTracing(log, provider)
	if err := b.ListenAndServe(ctx, opts.listen); err != nil {
		if code, ok := cannotRun(log, err); ok {
			return code
		}
		log.Error(err, "Bridge stopped with an error")
		return 1
	}
	log.Info("Bridge stopped")
	return 0
}
