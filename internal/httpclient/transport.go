package httpclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// MaxResponseHeaderBytes bounds the response headers of any request.
const MaxResponseHeaderBytes = 64 << 10

// connBufferBytes is the size of each connection's read and write buffer: every server
// with listChanged holds a standalone event stream on an HTTP/1 connection of its own
// for as long as it lives, and 4 KiB buffers per connection (net/http's default) were a
// tenth of what a server costs. Larger reads and writes bypass the buffers anyway.
const connBufferBytes = 1 << 10

// ErrNoCertificate is returned for a certificate authority bundle without a PEM
// certificate.
var ErrNoCertificate = errors.New("the certificate authority bundle holds no PEM certificate")

// SystemRoots is the system certificate pool, read once: x509.SystemCertPool returns a
// fresh copy, tens of KiB, on every call. It must not be changed; see [RootsWith].
var SystemRoots = sync.OnceValue(func() *x509.CertPool {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		return x509.NewCertPool()
	}
	return roots
})

// RootsWith returns the system roots and the certificates of caPEM, or the system roots
// themselves when caPEM is empty.
func RootsWith(caPEM []byte) (*x509.CertPool, error) {
	if len(caPEM) == 0 {
		return SystemRoots(), nil
	}
	roots := SystemRoots().Clone()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, ErrNoCertificate
	}
	return roots, nil
}

// RootsOnly returns the certificates of caPEM alone, or the system roots when caPEM is
// empty.
func RootsOnly(caPEM []byte) (*x509.CertPool, error) {
	if len(caPEM) == 0 {
		return SystemRoots(), nil
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, ErrNoCertificate
	}
	return roots, nil
}

// DialFunc dials an address, as http.Transport.DialContext does.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Options shape a pair of transports.
type Options struct {
	// Roots are the certificate authorities https trusts.
	Roots *x509.CertPool
	// Dial returns the dial function of the transport for scheme ("http" or "https"):
	// where the caller judges every address it connects to.
	Dial func(scheme string) DialFunc
	// ConnectTimeout bounds the TLS handshake (the dial function bounds the connect).
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a response's headers; zero waits for
	// as long as the request's context allows (event streams).
	ResponseHeaderTimeout time.Duration
	// MaxIdleConns and MaxIdleConnsPerHost bound the kept-alive idle connections.
	MaxIdleConns, MaxIdleConnsPerHost int
}

// Transports are a transport for plain http and one for https.
type Transports struct {
	Plain, Secure *http.Transport
}

// NewTransports returns the transports opts describe. Neither uses a proxy.
func NewTransports(opts Options) Transports {
	newTransport := func(scheme string) *http.Transport {
		return &http.Transport{
			Proxy:                  nil,
			DialContext:            opts.Dial(scheme),
			TLSClientConfig:        &tls.Config{RootCAs: opts.Roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    opts.ConnectTimeout,
			ResponseHeaderTimeout:  opts.ResponseHeaderTimeout,
			ForceAttemptHTTP2:      true,
			MaxIdleConns:           opts.MaxIdleConns,
			MaxIdleConnsPerHost:    opts.MaxIdleConnsPerHost,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: MaxResponseHeaderBytes,
			ExpectContinueTimeout:  time.Second,
			ReadBufferSize:         connBufferBytes,
			WriteBufferSize:        connBufferBytes,
		}
	}
	return Transports{Plain: newTransport("http"), Secure: newTransport("https")}
}

// ForScheme returns the transport for a URL scheme: Secure for https, Plain otherwise.
func (t Transports) ForScheme(scheme string) *http.Transport {
	if scheme == "https" {
		return t.Secure
	}
	return t.Plain
}

// CloseIdleConnections closes both transports' idle connections.
func (t Transports) CloseIdleConnections() {
	t.Plain.CloseIdleConnections()
	t.Secure.CloseIdleConnections()
}
