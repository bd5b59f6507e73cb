package gateway

import (
	"errors"

	"github.com/go-logr/logr"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// Audit lines quote what callers and servers choose (tool names, request ids, user names,
// reasons that name a tool, errors) in bounded size, whoever writes the line: names and
// ids are clipped to tracing.MaxName bytes where they are quoted (clip, quoteName), and
// the audit logger's sink clips every string or error value of a line to tracing.MaxText
// bytes besides. A clipped value is valid UTF-8 and ends in a marker saying it was
// clipped and from how many bytes.

// auditLogger returns l with every string or error value of its lines clipped (see
// auditSink).
func auditLogger(l logr.Logger) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		// One more frame between the caller and the sink: auditSink's own.
		sink = cd.WithCallDepth(1)
	}
	return logr.New(auditSink{sink: sink}).V(l.GetV())
}

// auditSink is the audit logger's sink: it hands the configured sink each line with its
// string and error values clipped to tracing.MaxText bytes.
type auditSink struct{ sink logr.LogSink }

// Init implements logr.LogSink; the configured sink was initialized by its own logger.
func (auditSink) Init(logr.RuntimeInfo) {}

// Enabled implements logr.LogSink.
func (a auditSink) Enabled(level int) bool { return a.sink.Enabled(level) }

// Info implements logr.LogSink.
func (a auditSink) Info(level int, msg string, kv ...any) { a.sink.Info(level, msg, clipValues(kv)...) }

// Error implements logr.LogSink.
func (a auditSink) Error(err error, msg string, kv ...any) {
	if err != nil && len(err.Error()) > tracing.MaxText {
		err = errors.New(tracing.ClipText(err.Error()))
	}
	a.sink.Error(err, msg, clipValues(kv)...)
}

// WithValues implements logr.LogSink.
func (a auditSink) WithValues(kv ...any) logr.LogSink {
	return auditSink{sink: a.sink.WithValues(clipValues(kv)...)}
}

// WithName implements logr.LogSink.
func (a auditSink) WithName(name string) logr.LogSink { return auditSink{sink: a.sink.WithName(name)} }

// WithCallDepth implements logr.CallDepthLogSink.
func (a auditSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := a.sink.(logr.CallDepthLogSink); ok {
		return auditSink{sink: cd.WithCallDepth(depth)}
	}
	return a
}

// clipValues returns key-value pairs kv with each string or error value clipped to
// tracing.MaxText bytes; kv itself when none needs it.
func clipValues(kv []any) []any {
	var out []any
	for i := 1; i < len(kv); i += 2 {
		var clipped string
		switch v := kv[i].(type) {
		case string:
			if clipped = tracing.ClipText(v); clipped == v {
				continue
			}
		case error:
			if v == nil || len(v.Error()) <= tracing.MaxText {
				continue
			}
			clipped = tracing.ClipText(v.Error())
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), kv...)
		}
		out[i] = clipped
	}
	if out == nil {
		return kv
	}
	return out
}
