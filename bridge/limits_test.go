package bridge

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-logr/logr/funcr"
)

func TestLineLimitReader(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		limit   int
		tooLong bool
	}{
		{"empty", "", 4, false},
		{"lines at the limit", "abcd\nefgh\n", 4, false},
		{"last line at the limit without newline", "abcd\nefgh", 4, false},
		{"line one over the limit", "abcd\nefghi\n", 4, true},
		{"unterminated line over the limit", "abcdefghijklmnop", 4, true},
		{"many short lines", strings.Repeat("ab\n", 1000), 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time and all at once must agree.
			for _, r := range []io.Reader{strings.NewReader(tt.input), iotest.OneByteReader(strings.NewReader(tt.input))} {
				got, err := io.ReadAll(&lineLimitReader{r: r, limit: tt.limit})
				if tt.tooLong {
					if !errors.Is(err, ErrMessageTooLarge) {
						t.Fatalf("err = %v, want ErrMessageTooLarge", err)
					}
					continue
				}
				if err != nil || string(got) != tt.input {
					t.Fatalf("read %q, %v; want the input back", got, err)
				}
			}
		})
	}
}

func TestLineLimitReaderStopsReadingAtTheLimit(t *testing.T) {
	src := &countingReader{r: io.MultiReader(strings.NewReader("ok\n"), infinite('x'))}
	_, err := io.ReadAll(&lineLimitReader{r: src, limit: 1000})
	if !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if src.n > 1004 {
		t.Errorf("read %d bytes of an endless line with a limit of 1000", src.n)
	}
	// Asking again after the error must not read on (or panic).
	l := &lineLimitReader{r: infinite('x'), limit: 10}
	buf := make([]byte, 64)
	_, _ = l.Read(buf)
	if n, err := l.Read(buf); n != 0 || !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("second read after the limit: %d, %v", n, err)
	}
}

func FuzzLineLimitReader(f *testing.F) {
	f.Add([]byte("abc\ndefgh\n"), 4)
	f.Add([]byte("\n\n\n"), 0)
	f.Fuzz(func(t *testing.T, data []byte, limit int) {
		if limit < 0 || limit > 1<<16 {
			return
		}
		got, err := io.ReadAll(&lineLimitReader{r: iotest.HalfReader(bytes.NewReader(data)), limit: limit})
		longest := 0
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			longest = max(longest, len(line))
		}
		if longest > limit {
			if !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("a %d-byte line passed a %d-byte limit", longest, limit)
			}
			return
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("lines within the limit: got %q, %v", got, err)
		}
	})
}

func TestLogStderrCutsLongLinesAndRateLimits(t *testing.T) {
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})

	input := "first\r\n" + strings.Repeat("z", 3*maxStderrLine) + "\nafter-long\n" + strings.Repeat("flood\n", 10*stderrBurst)
	logStderr(log, strings.NewReader(input))

	if !strings.Contains(logged[0], `"line"="first"`) {
		t.Errorf("first line logged as %s", logged[0])
	}
	if len(logged[1]) > maxStderrLine+200 || !strings.Contains(logged[1], `"truncated"=true`) {
		t.Errorf("a %d-byte line was logged as %d bytes", 3*maxStderrLine, len(logged[1]))
	}
	if !strings.Contains(logged[2], `"line"="after-long"`) {
		t.Errorf("the line after a long one was logged as %s", logged[2])
	}
	floods := 0
	for _, l := range logged {
		if strings.Contains(l, `"line"="flood"`) {
			floods++
		}
	}
	if floods > stderrBurst {
		t.Errorf("%d of %d flood lines logged at once, want at most the burst of %d", floods, 10*stderrBurst, stderrBurst)
	}
	if last := logged[len(logged)-1]; !strings.Contains(last, "Dropped MCP server stderr lines") {
		t.Errorf("last log line %s, want the dropped count", last)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// infinite is an endless stream of one byte.
type infinite byte

func (b infinite) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
