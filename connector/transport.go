package connector

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/httpclient"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// maxResponseHeaderBytes bounds the response headers of any request.
const maxResponseHeaderBytes = httpclient.MaxResponseHeaderBytes

// httpStack is the HTTP client of one session: redirect checks, header injection scoped
// to the configured origin and response limits, over a shared transport (see
// sharedtransport.go) whose dialer asks the egress decider about every address it
// connects to. It never sets http.Client.Timeout, which would cut event streams; every
// call carries its own context deadline instead.
//
// A connection is only ever used under a decision that admitted it: the stack's binding
// puts its decider and the shared transport of that decision together, and setDecider
// moves the stack to the transport of the new decision instead of changing a shared one.
// A request, or a response still being read, that started under the old binding is
// judged again against the new decider before its connection's next read or write (see
// judgedConn and judgedBody), so a kept-alive connection cannot carry a request, or
// deliver a response, the new decision denies.
type httpStack struct {
	client   *http.Client
	endpoint *url.URL
	headers  []Header
	limits   Limits
	obs      observer
	// auth is the session's OAuth token source, shared with its Upstreams; nil when
	// the server takes no OAuth token.
	auth *tokenSource
	// caller is, on a gateway Upstream of a server whose credentials follow the
	// caller, the caller's tokens (percaller.go) or the person's (peruser.go); it
	// replaces auth.
	caller bearerSource

	// issuers are the origins that issued the session ids this stack has seen, so
	// that session headers follow a redirect only to the session's own server.
	issuersMu sync.Mutex
	issuers   []sessionIssuer

	// cfg is what the stack acquires shared transports with.
	cfg Config
	// bound is the decider and its shared transport; bindMu serializes changing it.
	bound  atomic.Pointer[binding]
	bindMu sync.Mutex
	closed bool

	// tokenParent is the span of the request that last needed a token (tracing.go).
	tokenParent atomic.Pointer[oteltrace.SpanContext]
}

// deciderBox lets an interface value live in an atomic.Pointer.
type deciderBox struct{ EgressDecider }

func newHTTPStack(cfg Config, endpoint *url.URL) (*httpStack, error) {
	if cfg.Egress == nil {
		cfg.Egress = DefaultEgressDecider()
	}
	s := &httpStack{
		endpoint: endpoint,
		headers:  cfg.Headers,
		limits:   cfg.Limits,
		cfg:      cfg,
	}
	t, err := transports.acquire(cfg, cfg.Egress)
	if err != nil {
		return nil, err
	}
	s.bound.Store(&binding{box: &deciderBox{cfg.Egress}, transport: t})
	s.client = &http.Client{
		Transport:     &roundTripper{stack: s},
		CheckRedirect: s.checkRedirect,
	}
	return s, nil
}

// close releases the stack's shared transport; the last stack to release one closes its
// idle connections. Requests made after close still work, on the released transport.
func (s *httpStack) close() {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	transports.release(s.bound.Load().transport)
}

func (s *httpStack) egress() EgressDecider { return s.bound.Load().box.EgressDecider }

// setDecider makes d the decider of every later request and dial, on the shared
// transport of d's decision, and of every open connection's next read or write.
func (s *httpStack) setDecider(d EgressDecider) {
	if d == nil {
		d = DefaultEgressDecider()
	}
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	old := s.bound.Load()
	if s.closed {
		// Nothing to hold on to: judge with d on the transport the stack had.
		s.bound.Store(&binding{box: &deciderBox{d}, transport: old.transport})
		return
	}
	t, err := transports.acquire(s.cfg, d)
	if err != nil {
		// Only a CA bundle can fail, and it parsed when the stack was made.
		t = old.transport
		t.retain()
	}
	s.bound.Store(&binding{box: &deciderBox{d}, transport: t})
	transports.release(old.transport)
}

// send sends out over the stack's shared transport, judging every dial with the decider
// bound when the request started and binding the connection it gets to this stack, so
// that a decider change is judged on its next read or write.
func (s *httpStack) send(out *http.Request) (*http.Response, error) {
	b := s.bound.Load()
	got := &gotConn{}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		jc, ok := judgedConnOf(info.Conn)
		if !ok {
			return
		}
		got.dest, got.ok = jc.dest, true
		s.obs.dialed(jc.dest)
		if tc, isTLS := info.Conn.(*tls.Conn); !isTLS || tc.ConnectionState().NegotiatedProtocol != "h2" {
			// HTTP/1: the connection carries this request alone until it is done. An
			// HTTP/2 connection multiplexes requests of several stacks; their bodies
			// are judged instead.
			jc.user.Store(&connUser{stack: s, box: b.box})
		}
	}}
	// The request's span (the gateway's client span of a call, a connect's or a probe's
	// span) gets the TLS handshake as events: hooks of this same ClientTrace, not a second
	// one composed in (which net/http does by reflection), and only where there is a
	// handshake to record. The dial records its lookup and connect itself (dialFunc).
	if out.URL.Scheme == "https" {
		tracing.AddTLSEvents(trace, oteltrace.SpanFromContext(out.Context()))
	}
	ctx := context.WithValue(out.Context(), dialRequestKey{}, dialRequest{stack: s, binding: b})
	out = out.WithContext(httptrace.WithClientTrace(ctx, trace))
	var resp *http.Response
	var err error
	if carriesOwnConnection(out) {
		resp, err = b.transport.roundTripStream(out)
	} else {
		resp, err = b.transport.ForScheme(out.URL.Scheme).RoundTrip(out)
	}
	if err != nil {
		return nil, err
	}
	resp.Body = &judgedBody{body: resp.Body, stack: s, box: b.box, dest: got.dest, known: got.ok}
	return resp, nil
}

// gotConn is the destination of the connection a request got.
type gotConn struct {
	dest egress.Destination
	ok   bool
}

// dialFunc returns a DialContext that resolves the host itself, asks the egress decider
// about each address and dials the first allowed one by IP, so the address judged is
// the address connected to. The decider is that of the binding the request started
// under, which decides like the transport's own.
func (t *sharedTransport) dialFunc(scheme string) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		box := &deciderBox{t.decider}
		var obs *observer
		if r, ok := dialRequestFrom(ctx); ok {
			box, obs = r.binding.box, &r.stack.obs
		}
		host, portText, err := net.SplitHostPort(address)
		if err != nil {
			return nil, fmt.Errorf("bad dial address: %w", err)
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad dial port %q", portText)
		}
		host = strings.ToLower(host)

		// The span of the request the dial is for gets its lookup, its egress decisions
		// and its connects as events.
		span := oteltrace.SpanFromContext(ctx)
		traced := span.IsRecording()
		var addrs []netip.Addr
		if addr, err := netip.ParseAddr(host); err == nil {
			addrs = []netip.Addr{addr}
		} else {
			if traced {
				tracing.DNSStart(span, host)
			}
			addrs, err = t.resolver.LookupNetIP(ctx, "ip", host)
			if traced {
				tracing.DNSDone(span, err)
			}
			if err != nil {
				var dnsErr *net.DNSError
				if errors.As(err, &dnsErr) {
					return nil, err
				}
				return nil, newError(ReasonDNSFailure, "resolving host %s failed", host)
			}
			if len(addrs) == 0 {
				return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
			}
		}

		var denial *Error
		var dialErr error
		for _, addr := range addrs {
			addr = addr.Unmap()
			dest := egress.Destination{Scheme: scheme, Host: host, Addr: addr, Port: uint16(port)}
			e := judgeWith(box, dest)
			if traced {
				// The egress decision, with the address judged; the reason of a denial
				// names the rule, never a header or a query string.
				attrs := []attribute.KeyValue{attribute.String("server.address", host),
					attribute.String("network.peer.address", addr.String()), attribute.Int("server.port", int(port)),
					tracing.Decision.String("allowed")}
				if e != nil {
					attrs[3] = tracing.Decision.String("denied")
					attrs = append(attrs, tracing.Reason.String(e.Message))
				}
				span.AddEvent("egress.decision", oteltrace.WithAttributes(attrs...))
			}
			if e != nil {
				denial = e
				continue
			}
			peer := netip.AddrPortFrom(addr, uint16(port)).String()
			if traced {
				tracing.DialStart(span, network, peer)
			}
			conn, err := t.dialer.DialContext(ctx, network, peer)
			if traced {
				tracing.DialDone(span, peer, err)
			}
			if err != nil {
				dialErr = err
				continue
			}
			return &judgedConn{Conn: conn, dest: dest}, nil
		}
		if dialErr != nil {
			return nil, dialErr
		}
		if obs != nil {
			obs.record(denial)
		}
		return nil, denial
	}
}

// judgeDial returns the denial of dest by the current decider, or nil when it may be
// dialed.
func (s *httpStack) judgeDial(dest egress.Destination) *Error {
	return judgeWith(s.bound.Load().box, dest)
}

// judgeWith returns the denial of dest by the decider in box, or nil. What the egress
// package always denies (egress.AlwaysDenied) is denied whatever the decider says.
func judgeWith(box *deciderBox, dest egress.Destination) *Error {
	if reason, denied := egress.AlwaysDenied(dest.Addr); denied {
		return newError(ReasonEgressDenied, "connection to %s port %d denied: %s", dest.Host, dest.Port, reason)
	}
	if d := box.DecideDial(dest); !d.Allowed {
		return newError(ReasonEgressDenied, "connection to %s (%s) port %d denied: %s", dest.Host, dest.Addr, dest.Port, decisionText(d))
	}
	return nil
}

// judgedConn is a connection the dialer opened to dest. While an HTTP/1 request of a
// stack uses it (user), before each read and write, and after a read that returned
// data, it checks whether that stack's decider has changed since the request started
// and, if so, judges dest again. A denial closes the connection and fails the read or
// write with the EgressDenied error, so not a byte of a request goes out, and nothing
// more comes in, over a connection the current decision would not open. The check is a
// pointer comparison while nothing changes.
type judgedConn struct {
	net.Conn
	dest egress.Destination
	user atomic.Pointer[connUser]
}

// connUser is the stack whose request uses a connection, and the decider it was
// judged under.
type connUser struct {
	stack *httpStack
	box   *deciderBox
}

// judgedConnOf returns the judgedConn beneath a connection handed to a request.
func judgedConnOf(conn net.Conn) (*judgedConn, bool) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	jc, ok := conn.(*judgedConn)
	return jc, ok
}

// check judges the connection against its user's current decider if it has changed.
func (c *judgedConn) check() error {
	u := c.user.Load()
	if u == nil {
		return nil
	}
	box := u.stack.bound.Load().box
	if u.box == box {
		return nil
	}
	if e := judgeWith(box, c.dest); e != nil {
		u.stack.obs.record(e)
		_ = c.Close()
		return e
	}
	c.user.CompareAndSwap(u, &connUser{stack: u.stack, box: box})
	return nil
}

// Read implements net.Conn, judging the connection before and after reading.
func (c *judgedConn) Read(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		// The read may have blocked across a decider change: deliver nothing a
		// connection now denied received.
		if cerr := c.check(); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// Write implements net.Conn, judging the connection before writing.
func (c *judgedConn) Write(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// judgedBody is a response body read under the decider box its request started with.
// When the stack's decider has changed since, it judges the connection's destination
// again before delivering more, and a denial ends the body with the EgressDenied error.
// It covers what judgedConn cannot: HTTP/2 connections, which carry several stacks'
// requests at once.
type judgedBody struct {
	body  io.ReadCloser
	stack *httpStack
	box   *deciderBox
	dest  egress.Destination
	known bool
	err   error
}

func (b *judgedBody) check() error {
	if b.err != nil {
		return b.err
	}
	box := b.stack.bound.Load().box
	if box == b.box {
		return nil
	}
	var e *Error
	if b.known {
		e = judgeWith(box, b.dest)
	} else {
		e = newError(ReasonEgressDenied, "connection dropped: the egress decision changed")
	}
	if e != nil {
		b.stack.obs.record(e)
		_ = b.body.Close()
		b.err = e
		return e
	}
	b.box = box
	return nil
}

// Read implements io.Reader, judging before and after reading.
func (b *judgedBody) Read(p []byte) (int, error) {
	if err := b.check(); err != nil {
		return 0, err
	}
	n, err := b.body.Read(p)
	if n > 0 {
		if cerr := b.check(); cerr != nil {
			return 0, cerr
		}
	}
	return n, err
}

// Close implements io.Closer.
func (b *judgedBody) Close() error { return b.body.Close() }

func decisionText(d egress.Decision) string {
	text := d.Reason
	if text == "" {
		text = "not allowed"
	}
	if d.Policy != "" {
		text += " (policy " + d.Policy + ")"
	}
	return text
}

// checkRedirect judges one redirect hop: bounded hops, never https to http, and the
// egress decider's verdict. The dial to the target is judged again in the dialer.
func (s *httpStack) checkRedirect(req *http.Request, via []*http.Request) error {
	hop := len(via)
	from := via[len(via)-1].URL
	deny := func(format string, args ...any) error {
		e := newError(ReasonRedirectDenied, "redirect from %s to %s denied: %s",
			displayURL(from), displayURL(req.URL), fmt.Sprintf(format, args...))
		s.obs.record(e)
		return e
	}
	if hop > s.limits.MaxRedirects {
		return deny("more than %d redirects", s.limits.MaxRedirects)
	}
	if from.Scheme == "https" && req.URL.Scheme != "https" {
		return deny("redirects never downgrade https to http")
	}
	status := 0
	if req.Response != nil {
		status = req.Response.StatusCode
	}
	d := s.egress().DecideRedirect(egress.Redirect{
		From: publicURL(from),
		// The target keeps its user information: a redirect that carries credentials
		// is itself a reason to refuse it. Decisions never print it.
		To:         targetURL(req.URL),
		Method:     via[0].Method,
		StatusCode: status,
		Hop:        hop,
	})
	if !d.Allowed {
		return deny("%s", decisionText(d))
	}
	return nil
}

// targetURL copies a redirect target without query and fragment, keeping its userinfo
// for the egress decider to judge.
func targetURL(u *url.URL) *url.URL {
	out := publicURL(u)
	out.User = u.User
	return out
}

// publicURL copies u without userinfo, query and fragment.
func publicURL(u *url.URL) *url.URL {
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
}

// roundTripper scopes configured headers and the MCP session headers to the configured
// origin, refuses requests that go-sdk addresses to any other origin (an SSE endpoint
// event pointing elsewhere), records HTTP failures go-sdk would flatten into strings, and
// bounds response bodies.
type roundTripper struct {
	stack *httpStack
}

// credentialHeaders are credentials besides the configured headers that go-sdk or
// net/http may set; like the configured headers they never leave the configured origin.
var credentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Cookie2"}

// MCP session headers. They belong to the server that issued the session.
const (
	sessionIDHeader       = "Mcp-Session-Id"
	protocolVersionHeader = "Mcp-Protocol-Version"
	lastEventIDHeader     = "Last-Event-Id"
)

// maxSessionIssuers bounds the session ids whose issuing origin a stack remembers.
const maxSessionIssuers = 8

// sessionIssuer is a session id and the origin whose response carried it.
type sessionIssuer struct {
	id     string
	origin *url.URL
}

// scopeSessionHeaders drops the MCP session headers from a request that a redirect sends
// to another origin than the configured one, unless that origin issued the session: the
// session id is a capability for the issuer's session, and the protocol version and
// event ids were negotiated with and issued by it. The one exception is the protocol
// version of the sessionless era (2026-07-28 and later), which every request carries and
// which describes that request only; without it a session could not follow an allowed
// redirect at all.
func (s *httpStack) scopeSessionHeaders(out *http.Request) {
	id := out.Header.Get(sessionIDHeader)
	if id != "" && s.issuedBy(id, out.URL) {
		return
	}
	out.Header.Del(sessionIDHeader)
	out.Header.Del(lastEventIDHeader)
	if id != "" || out.Header.Get(protocolVersionHeader) < modernProtocol {
		out.Header.Del(protocolVersionHeader)
	}
}

// noteSessionIssuer remembers that the response to req carried session id id.
func (s *httpStack) noteSessionIssuer(id string, u *url.URL) {
	s.issuersMu.Lock()
	defer s.issuersMu.Unlock()
	if s.issuedByLocked(id, u) {
		return
	}
	if len(s.issuers) == maxSessionIssuers {
		s.issuers = s.issuers[1:]
	}
	s.issuers = append(s.issuers, sessionIssuer{id: id, origin: publicURL(u)})
}

// issuedBy reports whether a response from u's origin carried session id id.
func (s *httpStack) issuedBy(id string, u *url.URL) bool {
	s.issuersMu.Lock()
	defer s.issuersMu.Unlock()
	return s.issuedByLocked(id, u)
}

// issuedByLocked is issuedBy with issuersMu held.
func (s *httpStack) issuedByLocked(id string, u *url.URL) bool {
	return slices.ContainsFunc(s.issuers, func(is sessionIssuer) bool {
		return is.id == id && egress.SameOrigin(is.origin, u)
	})
}

func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	s := t.stack
	if refusesStream(req) {
		return noStream(req), nil
	}
	out := req.Clone(req.Context())
	if out.Header.Get(protocolVersionHeader) == "" {
		// A gateway Upstream's raw connection: go-sdk leaves the header to mcp.Client.
		if v := protocolVersionOf(req.Context()); v != "" {
			out.Header.Set(protocolVersionHeader, v)
		}
	}
	sameOrigin := egress.SameOrigin(req.URL, s.endpoint)
	// The trace context of the request's span goes to the server, never to another
	// origin; one the request carried from elsewhere is replaced.
	if sameOrigin {
		tracing.InjectHeader(req.Context(), out.Header)
	} else {
		tracing.InjectHeader(context.Background(), out.Header)
	}
	bearer := s.bearer()
	var sent string // the bearer token the request carries
	if sameOrigin {
		for _, h := range s.headers {
			out.Header.Set(h.Name, h.Value)
		}
		if bearer != nil {
			s.noteTokenParent(req.Context())
			tok, e := bearer.current()
			if e != nil {
				s.obs.record(e)
				return nil, e
			}
			if tok != "" {
				out.Header.Set("Authorization", "Bearer "+tok)
				sent = tok
			}
		}
	} else {
		// Only a redirect hop that checkRedirect allowed may leave the configured
		// origin (net/http sets Response on those); go-sdk itself addressing another
		// origin means the server told it to, through the legacy SSE endpoint event.
		if req.Response == nil {
			e := newError(ReasonRedirectDenied, "server pointed the session at %s; only %s is allowed",
				displayURL(req.URL), displayURL(s.endpoint))
			s.obs.record(e)
			return nil, e
		}
		for _, h := range s.headers {
			out.Header.Del(h.Name)
		}
		for _, name := range credentialHeaders {
			out.Header.Del(name)
		}
		s.scopeSessionHeaders(out)
	}

	resp, err := s.send(out)
	if err != nil {
		return nil, err
	}
	if sameOrigin && bearer != nil {
		if resp, err = s.authenticate(bearer, out, resp, sent); err != nil {
			return nil, err
		}
	}
	if id := resp.Header.Get(sessionIDHeader); id != "" {
		s.noteSessionIssuer(id, out.URL)
	}
	resp, err = s.inspect(out, resp)
	if resp != nil {
		// The caller's own request, not the clone that carried the credentials: go-sdk
		// holds a stream's response for as long as the stream lives.
		resp.Request = req
	}
	return resp, err
}

// bearerSource is where a stack's bearer tokens come from: the session's token source
// (oauth.go) or, on a gateway Upstream of a per-caller server, the caller's tokens
// (percaller.go).
type bearerSource interface {
	// current returns the token to send, or "" to send none yet.
	current() (string, *Error)
	// renew returns a token other than rejected, obtaining a new one if need be.
	renew(rejected string, ch oauth.Challenge) (string, *Error)
	// insufficientScope is the failure of a request answered insufficient_scope.
	insufficientScope(ch oauth.Challenge) *Error
	// tokenEndpoint names, for messages, the origin tokens come from.
	tokenEndpoint() string
}

// bearer returns the stack's bearer token source, or nil when it sends none.
func (s *httpStack) bearer() bearerSource {
	switch {
	case s.caller != nil:
		return s.caller
	case s.auth != nil:
		return s.auth
	}
	return nil
}

// authenticate handles the server's answer to a request for its OAuth token: a 401
// gets one new token (discovering where to get it the first time) and the request is
// sent once more; insufficient_scope fails with a reason naming the scope asked for.
func (s *httpStack) authenticate(auth bearerSource, out *http.Request, resp *http.Response, sent string) (*http.Response, error) {
	fail := func(e *Error) (*http.Response, error) {
		_ = resp.Body.Close()
		s.obs.record(e)
		return nil, e
	}
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return resp, nil
	}
	ch := oauth.ParseChallenge(resp.Header.Values("WWW-Authenticate"))
	if ch.Error == "insufficient_scope" {
		return fail(auth.insufficientScope(ch))
	}
	if resp.StatusCode != http.StatusUnauthorized || (out.Body != nil && out.GetBody == nil) {
		return resp, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	tok, e := auth.renew(sent, ch)
	if e != nil {
		s.obs.record(e)
		return nil, e
	}
	if err := out.Context().Err(); err != nil {
		return nil, err
	}
	retry := out.Clone(out.Context())
	if out.GetBody != nil {
		body, err := out.GetBody()
		if err != nil {
			return nil, err
		}
		retry.Body = body
	}
	retry.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.send(retry)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		ch := oauth.ParseChallenge(resp.Header.Values("WWW-Authenticate"))
		if ch.Error == "insufficient_scope" {
			return fail(auth.insufficientScope(ch))
		}
		if resp.StatusCode == http.StatusUnauthorized {
			detail := ""
			if ch.Error != "" {
				detail = " (" + oauth.SafeText(ch.Error, 64) + ")"
			}
			return fail(authError(ReasonUnauthorized, ReasonTokenRequestFailed,
				"server %s rejected a token fresh from %s%s", displayURL(s.endpoint), auth.tokenEndpoint(), detail))
		}
	}
	return resp, nil
}

// inspect records failures by status code and wraps the body in the matching limit.
func (s *httpStack) inspect(req *http.Request, resp *http.Response) (*http.Response, error) {
	s.obs.status(req.Method, resp.StatusCode)
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		s.obs.record(newError(ReasonUnauthorized, "server answered %d %s", code, http.StatusText(code)))
	case code == http.StatusNotFound && req.Header.Get(sessionIDHeader) == "":
		// With a session id, 404 means the session is gone: go-sdk reports that as
		// ErrSessionMissing and the session reconnects at once.
		s.obs.record(newError(ReasonNotFound, "endpoint %s answered 404 Not Found", displayURL(req.URL)))
	case code >= 400 && req.Method != http.MethodGet:
		// A GET answered 405 or the like is a server without a standalone event
		// stream, which go-sdk rightly tolerates; only POST failures are news.
		e := newError(ReasonProtocolError, "server answered %d %s", code, http.StatusText(code))
		// A server that is overloaded, restarting or behind a proxy without a backend
		// answers 429 or 5xx for a while and then recovers by itself; other 4xx stay
		// until someone changes the server or the spec.
		e.Transient = code == http.StatusTooManyRequests || code >= http.StatusInternalServerError
		s.obs.record(e)
	}

	if strings.HasPrefix(strings.ToLower(resp.Header.Get("Content-Type")), "text/event-stream") {
		resp.Body = &eventLimitBody{body: resp.Body, max: s.limits.MaxEventBytes, obs: &s.obs}
		return resp, nil
	}
	if resp.ContentLength > s.limits.MaxResponseBytes {
		_ = resp.Body.Close()
		e := responseTooLarge(s.limits.MaxResponseBytes)
		s.obs.record(e)
		return nil, e
	}
	limit := s.limits.MaxResponseBytes
	resp.Body = httpclient.NewBody(resp.Body, limit, func() error {
		e := responseTooLarge(limit)
		s.obs.record(e)
		return e
	})
	return resp, nil
}

func responseTooLarge(limit int64) *Error {
	return newError(ReasonLimitExceeded, "server response is larger than %d bytes", limit)
}

// observer records what the HTTP layer saw, for classification of errors that go-sdk
// reports only as text, and for re-judging live destinations when the decider changes.
type observer struct {
	mu       sync.Mutex
	incident *Error
	posts    []int                // status codes of POST requests since the last reset
	dests    []egress.Destination // distinct, at most maxDestinations
}

// maxDestinations bounds the destinations an observer remembers.
const maxDestinations = 64

// record keeps the first incident since the last reset: later failures are usually
// consequences of it.
func (o *observer) record(e *Error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.incident == nil {
		o.incident = e
	}
}

func (o *observer) status(method string, code int) {
	if method != http.MethodPost {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.posts) < 16 {
		o.posts = append(o.posts, code)
	}
}

// reset starts a new operation.
func (o *observer) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.incident = nil
	o.posts = o.posts[:0]
}

// last returns the incident recorded since the last reset, if any.
func (o *observer) last() *Error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.incident
}

// postStatuses returns the status codes of POST requests since the last reset.
func (o *observer) postStatuses() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.posts...)
}

func (o *observer) dialed(d egress.Destination) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.dests) < maxDestinations && !slices.Contains(o.dests, d) {
		o.dests = append(o.dests, d)
	}
}

func (o *observer) destinations() []egress.Destination {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.dests)
}
