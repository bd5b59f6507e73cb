package connector

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
)

// Event streams on connections of their own.
//
// A server that announces listChanged keeps a standalone GET event stream open for as
// long as its session lives, and on plain HTTP/1 that stream holds a connection to
// itself. Through http.Transport, such a connection costs a read and a write goroutine
// and the transport's connection state, on top of the goroutine go-sdk reads the stream
// with: at fleet scale, a third of what a server costs. Nothing else would ever use the
// connection, so nothing is gained by pooling it.
//
// So the stack sends a plain-HTTP event-stream GET over a connection of its own: dialed
// by the shared transport's judged dialer (the same egress decision, per address), the
// request written with net/http's own Request.Write and the response read with
// http.ReadResponse, so net/http does all HTTP framing, chunked bodies included. The
// connection is read by whoever reads the body, go-sdk's stream reader, and by no
// goroutine of its own; it is closed when the body is closed, read to its end, or the
// request's context ends. HTTPS streams stay on the shared transport, where HTTP/2
// carries many streams over one connection.

// streamBufferBytes is the read buffer of a stream's connection. go-sdk reads events
// through a buffer of its own, in reads that bypass this one; it holds the headers and
// each chunk's size line, and textproto reads longer header lines in pieces.
const streamBufferBytes = 512

// carriesOwnConnection reports whether req is an event-stream GET over plain HTTP, the
// request roundTripStream carries.
func carriesOwnConnection(req *http.Request) bool {
	return req.Method == http.MethodGet && req.URL.Scheme == "http" &&
		strings.Contains(req.Header.Get("Accept"), "text/event-stream")
}

// roundTripStream sends req over a new connection of its own and returns the response,
// whose body owns the connection.
func (t *sharedTransport) roundTripStream(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	conn, err := t.Plain.DialContext(ctx, "tcp", hostPort(req))
	if err != nil {
		return nil, err
	}
	// The stack learns where the stream went, and binds the connection to itself for
	// judging, as it does for a pooled connection.
	if trace := httptrace.ContextClientTrace(ctx); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: conn})
	}
	sc := &streamConn{conn: conn}
	sc.stopWatching = context.AfterFunc(ctx, sc.closeConn)

	out := req.Clone(ctx)
	out.Close = true // the connection carries this stream alone
	if err := out.Write(conn); err != nil {
		sc.close()
		return nil, contextFailure(ctx, err)
	}
	// Headers are read under the transport's header limit, the body without one (the
	// event limits bound each event).
	headers := &io.LimitedReader{R: conn, N: maxResponseHeaderBytes}
	br := bufio.NewReaderSize(headers, streamBufferBytes)
	resp, err := http.ReadResponse(br, req)
	for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 {
		// 1xx answers precede the real one; net/http's transport skips them too.
		resp, err = http.ReadResponse(br, req)
	}
	if err != nil {
		sc.close()
		if headers.N <= 0 {
			return nil, errors.New("server response headers exceeded the limit")
		}
		return nil, contextFailure(ctx, err)
	}
	headers.N = math.MaxInt64
	sc.body = resp.Body
	resp.Body = sc
	return resp, nil
}

// hostPort returns the address to dial for req's URL, with the scheme's default port.
func hostPort(req *http.Request) string {
	if port := req.URL.Port(); port != "" {
		return net.JoinHostPort(req.URL.Hostname(), port)
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// streamConn is the body of a response that owns its connection.
type streamConn struct {
	conn         net.Conn
	body         io.ReadCloser
	stopWatching func() bool
	closeOnce    sync.Once
}

// Read implements io.Reader; the end of the body, or an error, releases the connection.
func (s *streamConn) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if err != nil {
		s.close()
	}
	return n, err
}

// Close implements io.Closer. It closes the connection before the body: net/http's
// body would otherwise read an unfinished stream to its end.
func (s *streamConn) Close() error {
	s.close()
	return s.body.Close()
}

// close releases the connection and stops watching the request's context.
func (s *streamConn) close() {
	s.stopWatching()
	s.closeConn()
}

func (s *streamConn) closeConn() {
	s.closeOnce.Do(func() { _ = s.conn.Close() })
}

// contextFailure is the error of a request that failed on its connection: the
// context's, when it ended the request by closing the connection.
func contextFailure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
