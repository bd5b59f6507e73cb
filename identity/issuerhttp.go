package identity

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/httpclient"
)

// Bounds on what an issuer may send.
const (
	// maxDiscoveryBytes bounds the discovery document.
	maxDiscoveryBytes = 256 << 10
	// maxKeySetBytes bounds the key set (JWKS).
	maxKeySetBytes = 256 << 10
	// maxIntrospectionBytes bounds one introspection answer.
	maxIntrospectionBytes = 64 << 10
	// maxResponseBytes bounds any answer read through the issuer client, whoever reads
	// it (go-oidc reads the key set with io.ReadAll): the largest of the above.
	maxResponseBytes = maxDiscoveryBytes
)

// errAddressRefused is wrapped by dials the issuer client refuses.
var errAddressRefused = errors.New("address refused")

// refusedAddressError is a dial the issuer client refused, with the reason.
type refusedAddressError struct{ reason string }

func (e *refusedAddressError) Error() string { return "refusing to connect: " + e.reason }
func (e *refusedAddressError) Unwrap() error { return errAddressRefused }

// tooLargeError is an answer larger than its bound.
type tooLargeError struct{ limit int64 }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("answer larger than %d KiB", e.limit>>10)
}

// newIssuerClient returns the HTTP client every request to cfg's issuer goes through
// (discovery, key set, introspection). It
//   - dials no link-local or cloud metadata address (egress.AlwaysDenied), judged on the
//     resolved address at dial time, so DNS cannot rebind a name past it;
//   - speaks https, or http only when cfg.AllowInsecureHTTP and then only to loopback
//     addresses, again judged at dial time;
//   - trusts only cfg.CACertPEM when it is set (roots from the system otherwise);
//   - follows no redirect (the introspection request carries client credentials) and
//     uses no proxy from the environment (its dials would escape the checks above);
//   - bounds every answer to maxResponseBytes and every request to timeout.
func newIssuerClient(cfg *ProviderConfig, timeout time.Duration) (*http.Client, error) {
	roots, err := httpclient.RootsOnly(cfg.CACertPEM)
	if err != nil {
		return nil, errors.New("the certificate authority holds no PEM certificate")
	}
	dialTimeout := min(timeout, 5*time.Second)
	transports := httpclient.NewTransports(httpclient.Options{
		Roots: roots,
		Dial: func(scheme string) httpclient.DialFunc {
			loopbackOnly := scheme != "https"
			d := &net.Dialer{
				Timeout: dialTimeout,
				Control: func(_, address string, _ syscall.RawConn) error {
					return checkDial(address, loopbackOnly)
				},
			}
			return d.DialContext
		},
		ConnectTimeout:        dialTimeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          8,
		MaxIdleConnsPerHost:   4,
	})
	rt := &issuerTransport{https: transports.Secure}
	if cfg.AllowInsecureHTTP {
		rt.http = transports.Plain
	}
	return &http.Client{
		Transport: rt,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}

// checkDial refuses address (ip:port, already resolved) when it is link-local, a cloud
// metadata address or otherwise always denied, and, when loopbackOnly, when it is not a
// loopback address.
func checkDial(address string, loopbackOnly bool) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedAddressError{reason: "unparsable address"}
	}
	addr := ap.Addr().WithZone("").Unmap()
	if reason, denied := egress.AlwaysDenied(addr); denied {
		return &refusedAddressError{reason: reason}
	}
	if loopbackOnly && !addr.IsLoopback() {
		return &refusedAddressError{reason: fmt.Sprintf("%s is not a loopback address, and http is allowed only to loopback", addr)}
	}
	return nil
}

// issuerTransport sends https requests through https and, when allowed, http requests
// through a transport that dials loopback only; it bounds every answer's body.
type issuerTransport struct {
	https *http.Transport
	http  *http.Transport // nil unless AllowInsecureHTTP
}

// RoundTrip implements http.RoundTripper.
func (t *issuerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var next *http.Transport
	switch {
	case req.URL.Scheme == "https":
		next = t.https
	case req.URL.Scheme == "http" && t.http != nil:
		next = t.http
	default:
		closeBody(req)
		return nil, fmt.Errorf("refusing %s: the issuer's endpoints must be https (http only with allowInsecureHTTP, to loopback)", req.URL.Scheme)
	}
	if req.URL.User != nil {
		closeBody(req)
		return nil, errors.New("refusing a URL with user information")
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = httpclient.NewBody(resp.Body, maxResponseBytes, func() error {
		return &tooLargeError{limit: maxResponseBytes}
	})
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// readBounded reads at most limit bytes of body and fails when it holds more.
func readBounded(body io.Reader, limit int64) ([]byte, error) {
	return httpclient.ReadAll(body, limit, func() error { return &tooLargeError{limit: limit} })
}

// keySetTransport fetches the key set at most once per minInterval: a request for it
// sooner is answered with the last key set fetched. go-oidc's remote key set fetches
// again whenever a token names a key id it does not know (how rotation is picked up), so
// without this a flood of tokens with made-up key ids would be a flood of requests to
// the issuer. A failed fetch is an error of type *keySetFetchError, so that a refusal
// can tell an unreachable issuer from a bad signature.
type keySetTransport struct {
	next        http.RoundTripper
	url         string
	minInterval time.Duration

	mu      sync.Mutex
	fetched time.Time
	body    []byte
}

// keySetFetchError is a failed fetch of the key set.
type keySetFetchError struct{ err error }

func (e *keySetFetchError) Error() string { return "fetching the key set: " + e.err.Error() }
func (e *keySetFetchError) Unwrap() error { return e.err }

// RoundTrip implements http.RoundTripper.
func (t *keySetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || req.URL.String() != t.url {
		return t.next.RoundTrip(req)
	}
	// Holding the lock across the fetch makes concurrent fetches one.
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.body != nil && time.Since(t.fetched) < t.minInterval {
		return keySetResponse(req, t.body), nil
	}
	body, err := t.fetch(req)
	if err != nil {
		return nil, &keySetFetchError{err: err}
	}
	t.fetched = time.Now()
	t.body = body
	return keySetResponse(req, body), nil
}

func (t *keySetTransport) fetch(req *http.Request) ([]byte, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Accept", "application/json, application/jwk-set+json")
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, describeHTTPError(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the issuer answered %s%s", resp.Status, redirectHint(resp.StatusCode))
	}
	body, err := readBounded(resp.Body, maxKeySetBytes)
	if err != nil {
		return nil, err
	}
	return body, nil
}

func keySetResponse(req *http.Request, body []byte) *http.Response {
	return &http.Response{
		Status:        "200 OK",
		StatusCode:    http.StatusOK,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// redirectHint explains a redirect the issuer client did not follow.
func redirectHint(status int) string {
	if status >= 300 && status < 400 {
		return " (redirects are not followed: configure the URL it points to)"
	}
	return ""
}

// redactURL returns u without user information, query string or fragment: query
// strings may carry secrets and never go into messages.
func redactURL(u *url.URL) string {
	c := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return c.String()
}

// describeHTTPError returns err without the request URL that *url.Error carries (its
// query string may hold a secret): the caller names the URL itself, redacted.
func describeHTTPError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Err != nil {
		var refused *refusedAddressError
		if errors.As(ne.Err, &refused) {
			return refused
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timed out: %w", err)
	}
	return err
}
