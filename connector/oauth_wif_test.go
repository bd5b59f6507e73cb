package connector

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/golang-jwt/jwt/v5"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
)

// workloadJWTs is an AssertionSource that signs a workload JWT for the audience it is
// asked for (as the TokenRequest API does), or hands out a fixed one. It records the
// audiences asked for.
type workloadJWTs struct {
	key *ecdsa.PrivateKey

	mu        sync.Mutex
	audiences []string
	fixed     string // handed out as it is when set
	err       error  // returned when set
	minted    []string
}

func newWorkloadJWTs(t *testing.T) *workloadJWTs {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &workloadJWTs{key: key}
}

// sign returns a workload JWT for audience that expires after life.
func (s *workloadJWTs) sign(audience string, life time.Duration) string {
	now := time.Now()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.RegisteredClaims{
		Issuer: "https://cluster.example", Subject: "system:serviceaccount:ns:mcp-github",
		Audience: jwt.ClaimStrings{audience}, ID: rand.Text(),
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(life)),
	}).SignedString(s.key)
	if err != nil {
		panic(err)
	}
	return tok
}

func (s *workloadJWTs) Assertion(_ context.Context, audience string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audiences = append(s.audiences, audience)
	if s.err != nil {
		return "", s.err
	}
	if s.fixed != "" {
		return s.fixed, nil
	}
	tok := s.sign(audience, 10*time.Minute)
	s.minted = append(s.minted, tok)
	return tok, nil
}

func (s *workloadJWTs) set(fixed string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fixed, s.err = fixed, err
}

func (s *workloadJWTs) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.audiences...)
}

func (s *workloadJWTs) secrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]string(nil), s.minted...)
	if s.fixed != "" {
		out = append(out, s.fixed)
	}
	return out
}

// jwtBearerWorld is an oauthWorld whose authorization server grants only the JWT-bearer
// grant to workload JWTs signed by src for its issuer, or answers refuse when set.
type jwtBearerWorld struct {
	*oauthWorld
	src *workloadJWTs

	// refuse, when set, is the OAuth error the token endpoint answers; its description
	// echoes the assertion, as a careless server does.
	refuse string
	forms  []url.Values
}

func newJWTBearerWorld(t *testing.T) *jwtBearerWorld {
	t.Helper()
	w := &jwtBearerWorld{oauthWorld: newOAuthWorld(t), src: newWorkloadJWTs(t)}
	w.asMeta = func(o *oauthWorld) map[string]any {
		return map[string]any{
			"issuer": o.as.URL, "token_endpoint": o.as.URL + "/token",
			"grant_types_supported":                 []string{oauth.GrantTypeJWTBearer},
			"token_endpoint_auth_methods_supported": []string{"none"},
		}
	}
	w.token = func(rw http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		w.mu.Lock()
		w.forms = append(w.forms, r.PostForm)
		refuse := w.refuse
		w.mu.Unlock()
		fail := func(code, why string) {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusBadRequest)
			writeJSON(rw, map[string]string{"error": code, "error_description": why})
		}
		if r.PostForm.Get("grant_type") != oauth.GrantTypeJWTBearer {
			fail("unsupported_grant_type", "only the JWT-bearer grant")
			return
		}
		if refuse != "" {
			fail(refuse, "refused assertion "+r.PostForm.Get("assertion"))
			return
		}
		_, err := jwt.Parse(r.PostForm.Get("assertion"), func(*jwt.Token) (any, error) { return &w.src.key.PublicKey, nil },
			jwt.WithValidMethods([]string{"ES256"}), jwt.WithAudience(w.as.URL), jwt.WithExpirationRequired())
		if err != nil || r.PostForm.Get("resource") != w.mcp.URL+"/mcp" {
			fail("invalid_grant", "assertion does not verify")
			return
		}
		w.mu.Lock()
		w.issued++
		tok := fmt.Sprintf("access-token-%d-%s", w.issued, rand.Text())
		w.valid[tok] = time.Now().Add(time.Hour)
		w.mu.Unlock()
		writeJSON(rw, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
	}
	return w
}

// config returns a session config for the world's server with workload identity.
func (w *jwtBearerWorld) config(wi OAuth2WorkloadIdentity) Config {
	cfg := fastConfig(w.mcp.URL + "/mcp")
	cfg.Protocol = ProtocolStreamableHTTP
	wi.AllowInsecureHTTP = true
	if wi.Assertion == nil {
		wi.Assertion = w.src
	}
	cfg.WorkloadIdentity = &wi
	return cfg
}

func (w *jwtBearerWorld) tokenForms() []url.Values {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]url.Values(nil), w.forms...)
}

// assertAssertionOnlyAtTokenEndpoint fails when a workload JWT reached any request but a
// POST to the token endpoint.
func (w *jwtBearerWorld) assertAssertionOnlyAtTokenEndpoint() {
	w.t.Helper()
	secrets := w.src.secrets()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.server == "as" && r.path == "/token" && r.method == http.MethodPost {
			continue
		}
		for _, s := range secrets {
			if strings.Contains(r.authorization, s) || strings.Contains(r.body, s) {
				w.t.Errorf("a workload JWT reached %s %s %s", r.server, r.method, r.path)
			}
		}
		if strings.Contains(r.body, "assertion") {
			w.t.Errorf("an assertion reached %s %s %s", r.server, r.method, r.path)
		}
	}
}

func TestWorkloadIdentityJWTBearerGrant(t *testing.T) {
	w := newJWTBearerWorld(t)
	p := testPool(t)
	key := Key{"ns", "wif"}
	p.Ensure(key, w.config(OAuth2WorkloadIdentity{ClientID: "workload-client"}))
	snap := waitReady(t, p, key)
	if len(snap.Tools) != 2 {
		t.Errorf("tools = %d, want 2", len(snap.Tools))
	}
	if want := strings.TrimPrefix(w.as.URL, "http://"); !strings.Contains(snap.TokenEndpoint, want) {
		t.Errorf("TokenEndpoint = %q, want the origin of %s", snap.TokenEndpoint, w.as.URL)
	}
	// The JWT was asked for the authorization server's issuer; the grant carried it,
	// the client ID, the discovered scope and the server's URL, and no client secret.
	if got := w.src.asked(); len(got) != 1 || got[0] != w.as.URL {
		t.Errorf("audiences asked for = %q, want [%s]", got, w.as.URL)
	}
	forms := w.tokenForms()
	if len(forms) != 1 {
		t.Fatalf("token requests = %d, want 1", len(forms))
	}
	f := forms[0]
	if f.Get("grant_type") != oauth.GrantTypeJWTBearer || f.Get("assertion") != w.src.secrets()[0] ||
		f.Get("client_id") != "workload-client" || f.Get("scope") != "tools.read" || f.Get("resource") != w.mcp.URL+"/mcp" ||
		f.Has("client_secret") || f.Has("client_assertion") {
		t.Errorf("token request form = %v, want the JWT-bearer grant with the workload JWT, client_id, scope and resource", f)
	}
	w.assertAssertionOnlyAtTokenEndpoint()
	w.assertNoLeak(snap)
}

// The assertion's audience is the issuer; with a configured token endpoint, that
// endpoint unless an issuer is pinned.
func TestWorkloadIdentityAudience(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config func(w *jwtBearerWorld) OAuth2WorkloadIdentity
		want   func(w *jwtBearerWorld) string
	}{
		{"discovered issuer", func(*jwtBearerWorld) OAuth2WorkloadIdentity { return OAuth2WorkloadIdentity{} },
			func(w *jwtBearerWorld) string { return w.as.URL }},
		{"configured token URL", func(w *jwtBearerWorld) OAuth2WorkloadIdentity {
			return OAuth2WorkloadIdentity{TokenURL: w.as.URL + "/token"}
		}, func(w *jwtBearerWorld) string { return w.as.URL + "/token" }},
		{"configured token URL and pinned issuer", func(w *jwtBearerWorld) OAuth2WorkloadIdentity {
			return OAuth2WorkloadIdentity{TokenURL: w.as.URL + "/token", Issuer: w.as.URL}
		}, func(w *jwtBearerWorld) string { return w.as.URL }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newJWTBearerWorld(t)
			w.src.set(w.src.sign(w.as.URL, time.Hour), nil) // the AS verifies its issuer as audience
			p := testPool(t)
			key := Key{"ns", "wif-aud"}
			p.Ensure(key, w.config(tc.config(w)))
			waitReady(t, p, key)
			if got := w.src.asked(); len(got) != 1 || got[0] != tc.want(w) {
				t.Errorf("audiences asked for = %q, want [%s]", got, tc.want(w))
			}
		})
	}
}

// A refused grant is a reason of its own, with the token endpoint's words scrubbed of
// the assertion; the same assertion is not sent again, no other grant is tried, and a
// new assertion is.
func TestWorkloadIdentityRefusalsAreSurfacedAndNotRetried(t *testing.T) {
	for _, tc := range []struct {
		oauthError string
		reason     string
	}{
		{"invalid_grant", ReasonInvalidGrant},
		{"invalid_scope", ReasonInsufficientScope},
		{"unauthorized_client", ReasonInvalidClient},
	} {
		t.Run(tc.oauthError, func(t *testing.T) {
			var logs strings.Builder
			var logMu sync.Mutex
			p := testPool(t, func(o *Options) {
				o.Logger = funcr.New(func(prefix, args string) {
					logMu.Lock()
					defer logMu.Unlock()
					logs.WriteString(prefix + " " + args + "\n")
				}, funcr.Options{Verbosity: 10})
			})
			w := newJWTBearerWorld(t)
			w.refuse = tc.oauthError
			fixed := w.src.sign("https://wrong.example", time.Hour)
			w.src.set(fixed, nil)
			key := Key{"ns", "wif-refused"}
			p.Ensure(key, w.config(OAuth2WorkloadIdentity{ClientID: "workload-client"}))
			snap := waitAuthFailure(t, p, key, tc.reason, tc.reason)
			if snap.LastError.Transient {
				t.Errorf("%s is transient; a person has to act", tc.oauthError)
			}
			if !strings.Contains(snap.LastError.Message, tc.oauthError) || strings.Contains(snap.LastError.Message, fixed) {
				t.Errorf("message = %q, want the OAuth error and no assertion", snap.LastError.Message)
			}
			// The session goes on reconnecting with backoff; the token endpoint hears
			// of the refused assertion only once, and of no other grant.
			waitFor(t, p, key, "three failed connects", func(s Snapshot) bool { return s.ConsecutiveFailures >= 3 })
			var grants []string
			for _, f := range w.tokenForms() {
				grants = append(grants, f.Get("grant_type"))
			}
			if len(grants) != 1 || grants[0] != oauth.GrantTypeJWTBearer {
				t.Errorf("token requests with grant types %q, want one JWT-bearer grant", grants)
			}
			w.assertAssertionOnlyAtTokenEndpoint()
			w.assertNoLeak(snap)
			logMu.Lock()
			logged := logs.String()
			logMu.Unlock()
			if strings.Contains(logged, fixed) {
				t.Errorf("the logs carry the assertion:\n%s", logged)
			}

			// A new JWT (a renewed token, a rotated Secret) is presented at once.
			w.mu.Lock()
			w.refuse = ""
			w.mu.Unlock()
			w.src.set("", nil)
			waitReady(t, p, key)
			if n := len(w.tokenForms()); n != 2 {
				t.Errorf("token requests = %d, want 2", n)
			}
		})
	}
}

func TestWorkloadIdentityAssertionSourceFailure(t *testing.T) {
	w := newJWTBearerWorld(t)
	w.src.set("", &Error{Reason: ReasonTokenRequestFailed, Message: `ServiceAccount "mcp-github" not found`})
	p := testPool(t)
	key := Key{"ns", "wif-nosa"}
	p.Ensure(key, w.config(OAuth2WorkloadIdentity{}))
	snap := waitAuthFailure(t, p, key, ReasonTokenRequestFailed, ReasonWorkloadTokenUnavailable)
	if !strings.Contains(snap.LastError.Message, `ServiceAccount "mcp-github" not found`) {
		t.Errorf("message = %q, want the source's", snap.LastError.Message)
	}
	w.src.set("", errors.New("connection refused"))
	waitFor(t, p, key, "a plain error", func(s Snapshot) bool {
		return s.LastError != nil && s.LastError.Authentication == ReasonWorkloadTokenUnavailable &&
			strings.HasPrefix(s.LastError.Message, "obtaining the workload JWT")
	})
	w.assertNoTokenRequest()
}

// An authorization server that does not offer the JWT-bearer grant gets no assertion.
func TestWorkloadIdentityNeedsTheJWTBearerGrant(t *testing.T) {
	w := newJWTBearerWorld(t)
	w.asMeta = func(o *oauthWorld) map[string]any {
		return map[string]any{"issuer": o.as.URL, "token_endpoint": o.as.URL + "/token", "grant_types_supported": []string{"client_credentials"}}
	}
	p := testPool(t)
	key := Key{"ns", "wif-nogrant"}
	p.Ensure(key, w.config(OAuth2WorkloadIdentity{}))
	snap := waitAuthFailure(t, p, key, ReasonTokenRequestFailed, ReasonTokenRequestFailed)
	if !strings.Contains(snap.LastError.Message, "does not support the "+oauth.GrantTypeJWTBearer+" grant") {
		t.Errorf("message = %q", snap.LastError.Message)
	}
	w.assertNoTokenRequest()
	if got := w.src.asked(); len(got) != 0 {
		t.Errorf("the source was asked for %q, want nothing", got)
	}
}

// A token endpoint that redirects the grant to another origin gets the assertion once,
// and the other origin never.
func TestWorkloadIdentityTokenRedirectIsRefused(t *testing.T) {
	w := newJWTBearerWorld(t)
	w.token = func(rw http.ResponseWriter, r *http.Request) {
		http.Redirect(rw, r, w.capture.URL+"/token", http.StatusTemporaryRedirect)
	}
	p := testPool(t)
	key := Key{"ns", "wif-redirect"}
	cfg := w.config(OAuth2WorkloadIdentity{})
	cfg.Egress = allowAll{}
	p.Ensure(key, cfg)
	snap := waitAuthFailure(t, p, key, ReasonRedirectDenied, ReasonTokenRequestFailed)
	if !strings.Contains(snap.LastError.Message, "the workload JWT is sent only to the token endpoint") {
		t.Errorf("message = %q", snap.LastError.Message)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.server == "capture" {
			t.Errorf("the capture server got %s %s", r.method, r.path)
		}
	}
}

func TestWorkloadIdentityConfig(t *testing.T) {
	src := &workloadJWTs{}
	a := Config{URL: "http://h", WorkloadIdentity: &OAuth2WorkloadIdentity{Assertion: src, Scopes: []string{"a"}}}
	if !sameSession(a, Config{URL: "http://h", WorkloadIdentity: &OAuth2WorkloadIdentity{Assertion: src, Scopes: []string{"a"}}}) {
		t.Error("the same assertion source is not the same session")
	}
	if sameSession(a, Config{URL: "http://h", WorkloadIdentity: &OAuth2WorkloadIdentity{Assertion: &workloadJWTs{}, Scopes: []string{"a"}}}) {
		t.Error("another assertion source is the same session")
	}
	if sameSession(a, Config{URL: "http://h", OAuth2: &OAuth2ClientCredentials{ClientID: "c", ClientSecret: "s"}}) {
		t.Error("client credentials are the same session as workload identity")
	}

	p := testPool(t)
	both := a
	both.OAuth2 = &OAuth2ClientCredentials{ClientID: "c", ClientSecret: "secret-value"}
	p.Ensure(Key{"ns", "both"}, both)
	waitDown(t, p, Key{"ns", "both"}, ReasonInvalidSpec)
	none := Config{URL: "http://127.0.0.1:1/mcp", WorkloadIdentity: &OAuth2WorkloadIdentity{}}
	p.Ensure(Key{"ns", "nosource"}, none)
	snap := waitDown(t, p, Key{"ns", "nosource"}, ReasonInvalidSpec)
	if snap.LastError.Authentication != ReasonWorkloadTokenUnavailable {
		t.Errorf("Authentication = %q", snap.LastError.Authentication)
	}
}
