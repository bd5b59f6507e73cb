// Package frontdoor serves the manager's agent-facing endpoints on one address: the
// catalogue's handler and the gateway's side by side, the gateway's under
// gatewaypath.Prefix and the catalogue's everywhere else. The manager command builds it
// and adds it to the manager; every replica serves it.
//
// It owns the listener: its address, the server-wide timeouts and header bound, and the
// graceful shutdown. It sets no read or write timeout on the server as a whole, since the
// gateway's streams last as long as an agent's session: the catalogue bounds each of its
// own requests (catalog.Server.Handler), the gateway its own.
//
// It must not authenticate, bound or time out requests itself, or import the catalogue
// or the gateway: it routes handlers it is given.
package frontdoor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// DefaultAddress is the address the front door listens on unless told otherwise.
const DefaultAddress = ":8082"

// Server-wide timeouts and bounds.
const (
	readHeaderTimeout = 5 * time.Second
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 32 << 10
)

// Options configure a Server.
type Options struct {
	// Address is the TCP address to serve on, DefaultAddress when empty. "0" disables
	// the front door: Start then only waits for the context to end.
	Address string

	// Catalogue serves every request whose path does not start with gatewaypath.Prefix.
	Catalogue http.Handler

	// Gateway, when set, serves every request whose path starts with gatewaypath.Prefix
	// (/mcp/namespaces/), as it came: no deadline, no authentication of the catalogue's.
	// Without it the catalogue gets those requests too.
	Gateway http.Handler

	// Authorizations, when set, serves every request whose path starts with
	// AuthorizationsPrefix: the pages a person opens to authorize a perUser server and
	// the redirect URI authorization servers send them back to (gateway/userauth).
	Authorizations http.Handler

	// ShutdownTimeout bounds the graceful shutdown of the HTTP server; 10s when zero.
	ShutdownTimeout time.Duration

	// Logger logs the front door's lifecycle; the zero Logger discards.
	Logger logr.Logger
}

// Server is the front door: one HTTP server for the catalogue and the gateway. It is a
// manager.Runnable that every replica runs.
type Server struct {
	opts    Options
	handler http.Handler

	mu   sync.Mutex
	addr net.Addr

	started atomic.Bool
}

var (
	_ manager.Runnable               = (*Server)(nil)
	_ manager.LeaderElectionRunnable = (*Server)(nil)
)

// New returns a front door that serves opts.Catalogue and opts.Gateway. Add it to the
// manager with mgr.Add.
func New(opts Options) (*Server, error) {
	if opts.Catalogue == nil {
		return nil, errors.New("frontdoor: a catalogue handler is required")
	}
	if opts.Address == "" {
		opts.Address = DefaultAddress
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 10 * time.Second
	}
	handler := Mount(opts.Catalogue, opts.Gateway)
	if opts.Authorizations != nil {
		handler = mountAuthorizations(handler, opts.Authorizations)
	}
	return &Server{opts: opts, handler: handler}, nil
}

// Mount returns the handler that sends requests under gatewaypath.Prefix to gateway, when
// there is one, and everything else to catalogue. The gateway gets the request as it came.
func Mount(catalogue, gateway http.Handler) http.Handler {
	if gateway == nil {
		return catalogue
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, gatewaypath.Prefix) {
			catalogue.ServeHTTP(w, r)
			return
		}
		gateway.ServeHTTP(w, r)
	})
}

// AuthorizationsPrefix starts the paths of persons' authorization pages.
const AuthorizationsPrefix = "/oauth2/"

// mountAuthorizations sends requests under AuthorizationsPrefix to authorizations, and
// everything else to rest.
func mountAuthorizations(rest, authorizations http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, AuthorizationsPrefix) {
			authorizations.ServeHTTP(w, r)
			return
		}
		rest.ServeHTTP(w, r)
	})
}

// Handler returns the front door's HTTP handler: the catalogue and the gateway mounted
// side by side.
func (s *Server) Handler() http.Handler { return s.handler }

// NeedLeaderElection returns false: every manager replica serves the front door.
func (s *Server) NeedLeaderElection() bool { return false }

// Addr returns the address the front door listens on once Start has bound it, or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Start serves until ctx ends, then shuts the HTTP server down gracefully.
func (s *Server) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("the front door was already started")
	}
	log := s.opts.Logger
	if s.opts.Address == "0" {
		log.Info("Catalogue and gateway disabled")
		<-ctx.Done()
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.opts.Address)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.opts.Address, err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	// No ReadTimeout or WriteTimeout: the gateway's streams outlive them. The catalogue's
	// own routes get theirs per request.
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		// In-flight requests finish during a graceful shutdown rather than being cancelled.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			// Gateway streams do not end by themselves: close what is left.
			log.Error(err, "Catalogue and gateway did not shut down cleanly, closing their remaining connections")
			_ = srv.Close()
		}
	}()
	log.Info("Serving catalogue and gateway", "address", ln.Addr().String())
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serving the catalogue and the gateway: %w", err)
}
