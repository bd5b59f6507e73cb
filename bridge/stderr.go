package bridge

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/go-logr/logr"
)

const (
	// maxStderrLine is the longest stderr line logged; the rest of a longer line is dropped.
	maxStderrLine = 4 << 10
	// stderrLinesPerSecond and stderrBurst bound how fast one subprocess can fill the log.
	stderrLinesPerSecond = 20
	stderrBurst          = 100
)

// tokenBucket is a small rate limiter: rate tokens a second, at most burst saved up.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newTokenBucket(rate, burst float64) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, tokens: burst, last: time.Now()}
}

// allow takes a token if there is one.
func (b *tokenBucket) allow() bool {
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// logStderr logs each line r yields until EOF or a read error: lines are cut to
// maxStderrLine bytes and at most stderrLinesPerSecond are logged (after a burst of
// stderrBurst); how many were dropped is logged when logging resumes and at the end.
func logStderr(log logr.Logger, r io.Reader) {
	br := bufio.NewReaderSize(r, maxStderrLine)
	limiter := newTokenBucket(stderrLinesPerSecond, stderrBurst)
	dropped := 0
	for {
		line, err := br.ReadSlice('\n')
		truncated := false
		if errors.Is(err, bufio.ErrBufferFull) {
			truncated = true
			line = bytes.Clone(line)
			err = skipLine(br)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > 0 || truncated {
			if limiter.allow() {
				if dropped > 0 {
					log.Info("Dropped MCP server stderr lines over the rate limit", "dropped", dropped)
					dropped = 0
				}
				if truncated {
					log.Info("MCP server stderr", "line", string(line), "truncated", true)
				} else {
					log.Info("MCP server stderr", "line", string(line))
				}
			} else {
				dropped++
			}
		}
		if err != nil {
			if dropped > 0 {
				log.Info("Dropped MCP server stderr lines over the rate limit", "dropped", dropped)
			}
			return
		}
	}
}

// skipLine discards input up to and including the next newline.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}
