package bridge

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// ErrMessageTooLarge means a message exceeded Options.MaxMessageBytes: a line on the MCP
// server's stdout (which ends its session) or an HTTP request body (which is refused with
// 413).
var ErrMessageTooLarge = errors.New("message too large")

// lineLimitReader passes a newline-delimited stream through and fails with
// ErrMessageTooLarge as soon as one line grows beyond limit bytes, so that a subprocess
// writing an endless line costs the bridge at most about limit bytes of memory.
type lineLimitReader struct {
	r     io.Reader
	limit int
	line  int // bytes of the current line seen so far
}

func (l *lineLimitReader) Read(p []byte) (int, error) {
	if l.line > l.limit {
		// Sticky: json.Decoder may ask again after it has decoded a value that preceded the
		// over-long line.
		return 0, l.tooLarge()
	}
	// Never read more than would complete an over-long line, so the error comes before the
	// memory is spent.
	if room := l.limit - l.line + 1; len(p) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	data := p[:n]
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		l.line = 0
		data = data[i+1:]
	}
	l.line += len(data)
	if l.line > l.limit {
		return n, l.tooLarge()
	}
	return n, err
}

func (l *lineLimitReader) tooLarge() error {
	return fmt.Errorf("mcp server wrote a line longer than %d bytes: %w", l.limit, ErrMessageTooLarge)
}
