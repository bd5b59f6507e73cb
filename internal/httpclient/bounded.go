package httpclient

import "io"

// Body is a response body bounded to a number of bytes: a read that would go past the
// bound fails with the error Exceeded returns (called once), and every later read fails
// with it too. It reads at most one byte past the bound, which tells a body of exactly
// the bound from a longer one; the bytes up to the bound are delivered.
type Body struct {
	body      io.ReadCloser
	remaining int64
	exceeded  func() error
	err       error
}

// NewBody bounds body to limit bytes; exceeded makes the error of a body past it.
func NewBody(body io.ReadCloser, limit int64, exceeded func() error) *Body {
	return &Body{body: body, remaining: limit, exceeded: exceeded}
}

// Read implements io.Reader.
func (b *Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if int64(len(p)) > b.remaining+1 {
		p = p[:b.remaining+1]
	}
	n, err := b.body.Read(p)
	if int64(n) > b.remaining {
		n = int(b.remaining)
		b.remaining = 0
		b.err = b.exceeded()
		return n, b.err
	}
	b.remaining -= int64(n)
	return n, err
}

// Close implements io.Closer.
func (b *Body) Close() error { return b.body.Close() }

// ReadAll reads r to its end, at most limit bytes; when r holds more it fails with the
// error exceeded returns, having read limit+1 bytes.
func ReadAll(r io.Reader, limit int64, exceeded func() error) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, exceeded()
	}
	return data, nil
}
