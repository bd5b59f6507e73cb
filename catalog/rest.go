package catalog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/switchboard-mcp/switchboard/identity"
)

// routes builds the catalogue's handler. Every route is instrumented under a fixed name.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	m := s.metrics
	mux.Handle("/api/v1/servers", m.instrument("servers", s.rest(s.serveServers, "namespace", "labelSelector", "transport", "ready", "limit", "continue")))
	mux.Handle("/api/v1/namespaces/{namespace}/servers/{name}", m.instrument("server", s.rest(s.serveServer)))
	mux.Handle("/api/v1/tools", m.instrument("tools", s.rest(s.serveTools, "q", "namespace", "readOnly", "ready", "limit", "continue")))
	mux.Handle("/api/v1/toolsets", m.instrument("toolsets", s.rest(s.serveToolsets, "namespace")))
	mux.Handle("/api/v1/openapi.json", m.instrument("openapi", http.HandlerFunc(serveOpenAPI)))
	mux.Handle("/mcp", m.instrument("mcp", s.mcpHandler()))
	mux.Handle(RegistryPathPrefix+"/servers", m.instrument("registry_servers", http.HandlerFunc(s.serveRegistry)))
	mux.Handle(RegistryPathPrefix+"/servers/", m.instrument("registry_server", http.HandlerFunc(s.serveRegistry)))
	mux.Handle(ResourceMetadataPathPrefix+"/", m.instrument("resource_metadata", s.opts.ResourceMetadata))
	mux.Handle("/", m.instrument("other", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, errorf(http.StatusNotFound, "no such path; see /api/v1/openapi.json"))
	})))
	return bound(mux)
}

// bound rejects oversized query strings and bodies before any handler runs.
func bound(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.RawQuery) > maxQueryBytes {
			writeError(w, errorf(http.StatusRequestURITooLong, "query string must be at most %d bytes", maxQueryBytes))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		h.ServeHTTP(w, r)
	})
}

// restFunc answers one REST request for an authenticated caller.
type restFunc func(ctx context.Context, c *caller, r *http.Request, params url.Values) (any, *apiError)

// rest wraps a restFunc with method and parameter checks, authentication, JSON encoding
// and ETags.
func (s *Server) rest(fn restFunc, allowed ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, errorf(http.StatusMethodNotAllowed, "method %s is not allowed; use GET", r.Method))
			return
		}
		params, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeError(w, errorf(http.StatusBadRequest, "query string is malformed"))
			return
		}
		for name, values := range params {
			if !contains(allowed, name) {
				writeError(w, errorf(http.StatusBadRequest, "unknown query parameter %q; allowed: %s", name, strings.Join(allowed, ", ")))
				return
			}
			if len(values) > 1 {
				writeError(w, errorf(http.StatusBadRequest, "query parameter %q is given more than once", name))
				return
			}
		}
		c, aerr := s.admit(r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		body, aerr := fn(r.Context(), c, r, params)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		writeJSON(w, r, body)
	})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// admit is the door of every catalogue request, REST and MCP alike: 503 until the
// index has synced, then the gatekeeper's answer mapped to an HTTP error.
func (s *Server) admit(r *http.Request) (*caller, *apiError) {
	if !s.synced() {
		return nil, errorf(http.StatusServiceUnavailable, "the catalogue is starting; retry shortly")
	}
	c, err := s.gate.authenticate(r.Context(), r)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, identity.ErrUnauthenticated):
		// The message says why (missing, malformed, rejected) and never echoes the token.
		// The catalogue's /mcp points to its protected resource metadata.
		e := errorf(http.StatusUnauthorized, "%s", err.Error())
		// So do the registry's routes, to the metadata of /v0.1.
		switch {
		case r.URL.Path == "/mcp":
			e.challenge = s.opts.ResourceMetadata.Challenge(r.URL.Path)
		case strings.HasPrefix(r.URL.Path, RegistryPathPrefix+"/"):
			e.challenge = s.opts.ResourceMetadata.Challenge(RegistryPathPrefix)
		}
		return nil, e
	case errors.Is(err, identity.ErrTooManyReviews):
		return nil, errorf(http.StatusTooManyRequests, "%s", identity.ErrTooManyReviews.Error())
	default:
		s.log.Error(err, "Authentication failed")
		return nil, errorf(http.StatusInternalServerError, "authentication check failed")
	}
}

func (s *Server) serveServers(ctx context.Context, c *caller, _ *http.Request, p url.Values) (any, *apiError) {
	q := serverQuery{namespace: p.Get("namespace"), transport: p.Get("transport"), cont: p.Get("continue")}
	var aerr *apiError
	if q.limit, aerr = intParam(p, "limit"); aerr != nil {
		return nil, aerr
	}
	if q.ready, aerr = boolParam(p, "ready"); aerr != nil {
		return nil, aerr
	}
	if sel := p.Get("labelSelector"); sel != "" {
		parsed, err := labelsParse(sel)
		if err != nil {
			return nil, err
		}
		q.selector = parsed
	}
	return s.listServers(ctx, c, q)
}

func (s *Server) serveServer(ctx context.Context, c *caller, r *http.Request, _ url.Values) (any, *apiError) {
	return s.getServer(ctx, c, r.PathValue("namespace"), r.PathValue("name"))
}

func (s *Server) serveTools(ctx context.Context, c *caller, _ *http.Request, p url.Values) (any, *apiError) {
	q := toolQuery{q: p.Get("q"), namespace: p.Get("namespace"), cont: p.Get("continue")}
	var aerr *apiError
	if q.limit, aerr = intParam(p, "limit"); aerr != nil {
		return nil, aerr
	}
	if q.ready, aerr = boolParam(p, "ready"); aerr != nil {
		return nil, aerr
	}
	if q.readOnly, aerr = boolParam(p, "readOnly"); aerr != nil {
		return nil, aerr
	}
	return s.searchTools(ctx, c, q)
}

// labelsParse parses a label selector, mapping a syntax error to 400.
func labelsParse(sel string) (labels.Selector, *apiError) {
	parsed, err := labels.Parse(sel)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "labelSelector is invalid: %v", err)
	}
	return parsed, nil
}

func intParam(p url.Values, name string) (int, *apiError) {
	v := p.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, errorf(http.StatusBadRequest, "%s must be a positive integer", name)
	}
	return n, nil
}

func boolParam(p url.Values, name string) (*bool, *apiError) {
	v := p.Get(name)
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%s must be true or false", name)
	}
	return &b, nil
}

// buffers holds response buffers for reuse; large ones are dropped rather than kept.
var buffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBuffer = 1 << 20

// writeJSON writes body with a strong ETag, or 304 when the client's If-None-Match
// names it. Responses depend on the caller, so shared caches must not keep them.
func writeJSON(w http.ResponseWriter, r *http.Request, body any) {
	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxPooledBuffer {
			buffers.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(body); err != nil {
		writeError(w, errorf(http.StatusInternalServerError, "encoding the response failed"))
		return
	}
	writeBody(w, r, buf.Bytes())
}

// writeBody writes an encoded JSON body as writeJSON does.
func writeBody(w http.ResponseWriter, r *http.Request, body []byte) {
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "private, no-cache")
	h.Set("Vary", "Authorization")
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body) //nolint:gosec // JSON served as application/json with nosniff: no browser renders it as HTML
}

// etagMatches implements the weak comparison If-None-Match uses.
func etagMatches(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, candidate := range strings.Split(header, ",") {
		candidate = strings.TrimSpace(candidate)
		if candidate == "*" || strings.TrimPrefix(candidate, "W/") == etag {
			return true
		}
	}
	return false
}

// writeError writes a JSON Error.
func writeError(w http.ResponseWriter, e *apiError) {
	errorHeaders(w, e)
	w.WriteHeader(e.code)
	_ = json.NewEncoder(w).Encode(Error{Code: e.code, Reason: reason(e.code), Message: e.msg})
}

// errorHeaders sets the headers of an error answer: its content type, no caching, and
// the challenge of a 401 or the Retry-After of a 429.
func errorHeaders(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	switch e.code {
	case http.StatusUnauthorized:
		if e.challenge != "" {
			h.Set("WWW-Authenticate", e.challenge)
		} else {
			h.Set("WWW-Authenticate", `Bearer realm="switchboard-catalog"`)
		}
	case http.StatusTooManyRequests:
		h.Set("Retry-After", strconv.Itoa(int(identity.ReviewRetryAfter/time.Second)))
	}
}

// reason turns a status code into a PascalCase reason: 404 -> NotFound.
func reason(code int) string {
	text := http.StatusText(code)
	if text == "" {
		return "Unknown"
	}
	var b strings.Builder
	for _, word := range strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == '-' }) {
		b.WriteString(strings.ToUpper(word[:1]) + word[1:])
	}
	return b.String()
}
