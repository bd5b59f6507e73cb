package identity

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// zitadelOPEnv names the binary hack/zitadel-op.sh builds: zitadel/oidc's example
// OpenID provider, served on loopback.
const zitadelOPEnv = "SWITCHBOARD_ZITADEL_OP"

// zitadelRedirect is where the example OP sends the browser back with a code; nothing
// listens there: the test reads the code from the redirect.
const zitadelRedirect = "http://127.0.0.1:9/callback"

// startZitadelOP runs the example OP and returns its issuer URL.
func startZitadelOP(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(zitadelOPEnv)
	if bin == "" {
		t.Skipf("%s is not set: run with %s=\"$(hack/zitadel-op.sh)\"", zitadelOPEnv, zitadelOPEnv)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PORT=0", "REDIRECT_URI="+zitadelRedirect)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the example OP's issuer: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.TrimSpace(line)
}

// zitadelLogin logs test-user in at the example OP as a browser would (authorization
// code with PKCE for the client "web", the OP's login page driven over HTTP) and returns
// the tokens the code is exchanged for.
func zitadelLogin(t *testing.T, issuer string) *oauth2.Token {
	t.Helper()
	ctx := context.Background()
	conf := &oauth2.Config{
		ClientID:     "web",
		ClientSecret: "secret",
		Endpoint:     oauth2.Endpoint{AuthURL: issuer + "auth", TokenURL: issuer + "oauth/token"},
		RedirectURL:  zitadelRedirect,
		Scopes:       []string{"openid", "email", "profile"},
	}
	verifier := oauth2.GenerateVerifier()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), zitadelRedirect) {
			return http.ErrUseLastResponse // back at the client: the code is in Location
		}
		return nil
	}}
	get := func(u string) (status int, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}

	// 1. The authorization request lands on the login page, which carries the request id.
	status, page := get(conf.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier)))
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(page)
	if status != http.StatusOK || m == nil {
		t.Fatalf("the authorization request answered %d without a login form:\n%.500s", status, page)
	}
	// 2. The login form is posted; the OP redirects back to the client with a code.
	form := url.Values{"id": {m[1]}, "username": {"test-user@127.0.0.1"}, "password": {"verysecure"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, issuer+"login/username", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	back, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || back.Query().Get("code") == "" || back.Query().Get("state") != "state-1" {
		t.Fatalf("the login answered %s, Location %q: want a redirect to the client with a code", resp.Status, resp.Header.Get("Location"))
	}
	// 3. The client exchanges the code, with its secret and the PKCE verifier.
	tok, err := conf.Exchange(ctx, back.Query().Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchanging the code: %v", err)
	}
	return tok
}

// TestZitadelExampleOP checks tokens of a real OpenID provider nobody here wrote:
// zitadel/oidc's example OP issues opaque access tokens, judged by introspection, and
// JWT ID tokens (audience: the client), judged with its key set.
func TestZitadelExampleOP(t *testing.T) {
	issuer := startZitadelOP(t)
	tok := zitadelLogin(t, issuer)
	ctx := context.Background()
	idToken, _ := tok.Extra("id_token").(string)
	if looksLikeJWT(tok.AccessToken) || !looksLikeJWT(idToken) {
		t.Fatalf("want an opaque access token and a JWT ID token from the example OP")
	}

	base := ProviderConfig{
		Name:              "zitadel",
		IssuerURL:         issuer,
		AllowInsecureHTTP: true, // the example OP serves http on loopback
		// The example OP says a token is active only to the client it was issued to,
		// and sets client_id but no aud in its answer: the client is the audience.
		Audiences:      []string{"web"},
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		ValidationRules: []ValidationRule{
			{Expression: "claims.email_verified == true", Message: "email must be verified"},
		},
		Advertise: true,
	}

	t.Run("opaque access token by introspection", func(t *testing.T) {
		cfg := base
		cfg.Introspection = &Introspection{ClientID: "web", ClientSecret: "secret"}
		ps := applied(t, Options{}, cfg)
		caller, err := ps.Authenticate(ctx, tok.AccessToken)
		if err != nil {
			t.Fatalf("the access token: %v", err)
		}
		if caller.Username != "oidc:test-user@zitadel.ch" {
			t.Errorf("username %q, want oidc:test-user@zitadel.ch", caller.Username)
		}
		refused(t, ps, "not-a-token-the-op-issued", ReasonInactive, "secret")

		// Introspecting as another client: the OP says the token is not active for it.
		other := base
		other.Introspection = &Introspection{ClientID: "api", ClientSecret: "secret"}
		refused(t, applied(t, Options{}, other), tok.AccessToken, ReasonInactive, "secret")
	})

	t.Run("ID token by signature", func(t *testing.T) {
		cfg := base
		cfg.UsernameClaim = "sub"
		cfg.ValidationRules = nil
		ps := applied(t, Options{}, cfg)
		caller, err := ps.Authenticate(ctx, idToken)
		if err != nil {
			t.Fatalf("the ID token: %v", err)
		}
		if !strings.HasPrefix(caller.Username, "oidc:") || caller.Username == "oidc:" {
			t.Errorf("username %q", caller.Username)
		}
		t.Logf("ID token mapped to %q", caller.Username)
		// Without introspection, the opaque access token is for no provider.
		refused(t, ps, tok.AccessToken, ReasonUnknownIssuer)

		wrong := cfg
		wrong.Audiences = []string{"https://mcp.example.com"}
		refused(t, applied(t, Options{}, wrong), idToken, ReasonWrongAudience)
	})
}
