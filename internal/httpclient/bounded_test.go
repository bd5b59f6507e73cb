package httpclient

import (
	"errors"
	"io"
	"strings"
	"testing"
)

var errTooLarge = errors.New("too large")

func TestBodyDeliversUpToTheBoundAndFailsPastIt(t *testing.T) {
	for _, tc := range []struct {
		body    string
		limit   int64
		want    string
		tooMuch bool
	}{
		{"12345", 5, "12345", false},
		{"1234", 5, "1234", false},
		{"123456", 5, "12345", true},
		{"", 0, "", false},
		{"1", 0, "", true},
	} {
		b := NewBody(io.NopCloser(strings.NewReader(tc.body)), tc.limit, func() error { return errTooLarge })
		got, err := io.ReadAll(b)
		if string(got) != tc.want || errors.Is(err, errTooLarge) != tc.tooMuch {
			t.Errorf("body %q bounded to %d: read %q, %v; want %q, too large %v", tc.body, tc.limit, got, err, tc.want, tc.tooMuch)
		}
		if tc.tooMuch {
			if n, err := b.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errTooLarge) {
				t.Errorf("body %q bounded to %d: a read after the failure = %d, %v", tc.body, tc.limit, n, err)
			}
		}
	}
}

func TestReadAll(t *testing.T) {
	if got, err := ReadAll(strings.NewReader("abc"), 3, func() error { return errTooLarge }); err != nil || string(got) != "abc" {
		t.Errorf("ReadAll of exactly the bound = %q, %v", got, err)
	}
	if _, err := ReadAll(strings.NewReader("abcd"), 3, func() error { return errTooLarge }); !errors.Is(err, errTooLarge) {
		t.Errorf("ReadAll past the bound = %v, want the bound's error", err)
	}
}
