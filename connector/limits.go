package connector

import (
	"io"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
)

// eventLimitBody watches an event stream and records a LimitExceeded incident when one
// event grows past max bytes. go-sdk enforces the same bound (its MaxEventSize) and
// breaks the stream; this wrapper only makes the failure classifiable, and stops reading
// at twice the bound should the two ever disagree.
type eventLimitBody struct {
	body    io.ReadCloser
	max     int
	obs     *observer
	current int // bytes of the event being read, line terminators included
	lineLen int // bytes of the line being read, terminator excluded
	err     error
}

func (b *eventLimitBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	for i := range n {
		b.current++
		switch p[i] {
		case '\n':
			if b.lineLen == 0 {
				b.current = 0 // a blank line ends the event
			}
			b.lineLen = 0
		case '\r':
		default:
			b.lineLen++
		}
		if b.current >= b.max {
			b.obs.record(newError(ReasonLimitExceeded, "server sent an event larger than %d bytes", b.max))
		}
		if b.current > 2*b.max {
			b.err = newError(ReasonLimitExceeded, "server sent an event larger than %d bytes", b.max)
			return i, b.err
		}
	}
	return n, err
}

func (b *eventLimitBody) Close() error { return b.body.Close() }

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func TruncateUTF8(s string, n int) string { return oauth.TruncateUTF8(s, n) }
