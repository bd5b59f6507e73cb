package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// ZitadelOPEnv names the environment variable holding the binary hack/zitadel-op.sh
// builds: zitadel/oidc's example OpenID provider, served on loopback.
const ZitadelOPEnv = "SWITCHBOARD_ZITADEL_OP"

// The example OP's client and user, as its storage registers them (hack/zitadel-op.sh).
const (
	// ZitadelRedirect is where the example OP sends the browser back with a code;
	// nothing listens there: the login reads the code from the redirect.
	ZitadelRedirect = "http://127.0.0.1:9/callback"
	// ZitadelClientID and ZitadelClientSecret are the OP's confidential client "web".
	// Its introspection answers carry client_id "web" and no aud, its ID tokens aud
	// "web": a provider trusting the OP lists "web" among its audiences.
	ZitadelClientID     = "web"
	ZitadelClientSecret = "secret"
	// ZitadelEmail is the email claim of the user the login signs in (test-user).
	ZitadelEmail = "test-user@zitadel.ch"
)

// StartZitadelOP runs the example OP on a free loopback port and returns its issuer URL,
// http://127.0.0.1:PORT/. It skips the test when SWITCHBOARD_ZITADEL_OP is not set; the
// OP dies with the test.
func StartZitadelOP(t testing.TB) string {
	t.Helper()
	return startZitadelOP(t)
}

// ZitadelAdmins are the users of StartZitadelOPWithAdmins, password ZitadelPassword.
var ZitadelAdmins = []string{"alice@127.0.0.1", "bob@127.0.0.1"}

// ZitadelPassword is the password of every user of the example OP here.
const ZitadelPassword = "verysecure"

// StartZitadelOPWithAdmins is StartZitadelOP with two users instead of the built-in
// ones, ZitadelAdmins, both admins: the example OP's token exchange refuses to exchange
// the token of a user who is not (unless an actor token comes along). Their subjects
// are their names before the "@".
func StartZitadelOPWithAdmins(t testing.TB) string {
	t.Helper()
	return startZitadelOP(t, "USERS_FILE="+zitadelAdminsFile(t))
}

// StartZitadelOPWithAdminsRedirectingTo is StartZitadelOPWithAdmins whose clients
// ("web", "api", "native") also accept the redirect URIs given, besides
// ZitadelRedirect: a test's own callback, say.
func StartZitadelOPWithAdminsRedirectingTo(t testing.TB, redirectURIs ...string) string {
	t.Helper()
	return startZitadelOP(t, "USERS_FILE="+zitadelAdminsFile(t), "REDIRECT_URI="+strings.Join(append([]string{ZitadelRedirect}, redirectURIs...), ","))
}

// zitadelAdminsFile writes the example OP's users file of ZitadelAdmins and returns its
// path.
func zitadelAdminsFile(t testing.TB) string {
	t.Helper()
	users := map[string]map[string]any{}
	for _, name := range ZitadelAdmins {
		id, _, _ := strings.Cut(name, "@")
		users[id] = map[string]any{"ID": id, "Username": name, "Password": ZitadelPassword, "FirstName": id, "LastName": "Example",
			"Email": id + "@example.test", "EmailVerified": true, "PreferredLanguage": "en", "IsAdmin": true}
	}
	data, err := json.Marshal(users)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func startZitadelOP(t testing.TB, env ...string) string {
	t.Helper()
	bin := os.Getenv(ZitadelOPEnv)
	if bin == "" {
		t.Skipf("%s is not set: run with %s=\"$(hack/zitadel-op.sh)\"", ZitadelOPEnv, ZitadelOPEnv)
	}
	cmd := exec.Command(bin) //nolint:noctx,gosec // the binary hack/zitadel-op.sh built, named by the test environment; killed at cleanup
	cmd.Env = append(append(os.Environ(), "PORT=0", "REDIRECT_URI="+ZitadelRedirect), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = processGroupDyingWithParent()
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

// ZitadelBrowserLogin is an AuthorizationCodeFetcher that does what a person does in a
// browser: opens the authorization URL, fills in the example OP's login page as
// test-user and follows the redirect back to the client, whose code and state it
// returns. It logs each step with t.Logf.
func ZitadelBrowserLogin(t testing.TB, issuer string) auth.AuthorizationCodeFetcher {
	return zitadelBrowserLoginAs(t, issuer, "test-user@127.0.0.1")
}

// zitadelBrowserLoginAs is ZitadelBrowserLogin as the user username.
func zitadelBrowserLoginAs(t testing.TB, issuer, username string) auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		jar, err := cookiejar.New(nil)
		if err != nil {
			return nil, err
		}
		browser := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			if strings.HasPrefix(req.URL.String(), ZitadelRedirect) {
				return http.ErrUseLastResponse // back at the client: the code is in Location
			}
			return nil
		}}
		t.Logf("login: the client opens %s", redactQuery(args.URL))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, args.URL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := browser.Do(req)
		if err != nil {
			return nil, err
		}
		page, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindSubmatch(page)
		if resp.StatusCode != http.StatusOK || m == nil {
			return nil, errors.New("the authorization request did not land on a login form")
		}
		t.Logf("login: the OP shows its login page (%s); %s logs in", resp.Request.URL.Path, username)
		form := url.Values{"id": {string(m[1])}, "username": {username}, "password": {ZitadelPassword}}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, issuer+"login/username", strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err = browser.Do(req)
		if err != nil {
			return nil, err
		}
		_ = resp.Body.Close()
		back, err := url.Parse(resp.Header.Get("Location"))
		if err != nil || back.Query().Get("code") == "" {
			return nil, errors.New("the login did not redirect back to the client with a code")
		}
		t.Logf("login: the OP redirects back to the client with a code")
		return &auth.AuthorizationResult{Code: back.Query().Get("code"), State: back.Query().Get("state"), Iss: back.Query().Get("iss")}, nil
	}
}

// ZitadelOAuthHandler returns go-sdk's OAuth handler for an MCP client transport that
// logs in at the example OP as its preregistered client "web" through
// ZitadelBrowserLogin, discovering the OP from the resource's protected resource
// metadata as any MCP client does. token, when set, turns the exchanged token into the
// one the client presents (the ID token, say).
func ZitadelOAuthHandler(t testing.TB, issuer string, token func(*oauth2.Token) *oauth2.Token) *auth.AuthorizationCodeHandler {
	t.Helper()
	cfg := &auth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{
			ClientID:         ZitadelClientID,
			ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: ZitadelClientSecret},
		},
		RedirectURL:              ZitadelRedirect,
		AuthorizationCodeFetcher: ZitadelBrowserLogin(t, issuer),
		AcceptUnadvertisedIss:    true,
		Client:                   &http.Client{Transport: RootIssuerDiscovery{}, Timeout: 10 * time.Second},
	}
	if token != nil {
		cfg.NewTokenSource = func(_ context.Context, _ *oauth2.Config, tok *oauth2.Token) (oauth2.TokenSource, error) {
			return oauth2.StaticTokenSource(token(tok)), nil
		}
	}
	handler, err := auth.NewAuthorizationCodeHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return handler
}

// ZitadelLogin logs test-user in at the example OP without an MCP client: the
// authorization code flow with PKCE for the client "web" (scopes openid, email,
// profile), the login page driven by ZitadelBrowserLogin, and returns the tokens the
// code is exchanged for: an opaque access token and, in id_token, a JWT.
func ZitadelLogin(t testing.TB, issuer string) *oauth2.Token {
	t.Helper()
	return ZitadelLoginAs(t, issuer, "test-user@127.0.0.1")
}

// ZitadelLoginAs is ZitadelLogin as the user username.
func ZitadelLoginAs(t testing.TB, issuer, username string) *oauth2.Token {
	t.Helper()
	ctx := context.Background()
	conf := &oauth2.Config{
		ClientID:     ZitadelClientID,
		ClientSecret: ZitadelClientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: issuer + "auth", TokenURL: issuer + "oauth/token"},
		RedirectURL:  ZitadelRedirect,
		Scopes:       []string{"openid", "email", "profile"},
	}
	verifier := oauth2.GenerateVerifier()
	res, err := zitadelBrowserLoginAs(t, issuer, username)(ctx, &auth.AuthorizationArgs{
		URL: conf.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != "state-1" {
		t.Fatalf("the login came back with state %q, want state-1", res.State)
	}
	tok, err := conf.Exchange(ctx, res.Code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchanging the code: %v", err)
	}
	return tok
}

// RootIssuerDiscovery is an http.RoundTripper that works around go-sdk v1.8.0's
// discovery for an issuer whose path is "/" (the example OP's http://127.0.0.1:PORT/, as
// Auth0's issuers are): it builds the path-insertion URLs
// /.well-known/openid-configuration/ and //.well-known/... (RFC 8414 §3.1 says to drop
// the terminating "/" first), which no OP serves, and then falls back to guessed
// endpoints. Only those two paths are rewritten, to the one OpenID Connect Discovery
// defines; every other request goes out unchanged through http.DefaultTransport.
type RootIssuerDiscovery struct{}

// RoundTrip rewrites the two malformed discovery paths and sends the request.
func (RootIssuerDiscovery) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.URL.Path {
	case "/.well-known/openid-configuration/", "//.well-known/openid-configuration":
		req = req.Clone(req.Context())
		req.URL.Path = "/.well-known/openid-configuration"
	}
	return http.DefaultTransport.RoundTrip(req)
}

// redactQuery returns raw without its query, which carries the state and PKCE challenge.
func redactQuery(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	u.RawQuery = "…"
	return u.String()
}

// ZitadelTokenVerifier is a go-sdk bearer token verifier for an MCP server that trusts
// the example OP at issuer: it asks the OP's introspection endpoint (as the client
// ZitadelClientID) about every token, and takes the active ones as their subject.
func ZitadelTokenVerifier(t testing.TB, issuer string) auth.TokenVerifier {
	t.Helper()
	resp, err := http.Get(issuer + ".well-known/openid-configuration") //nolint:noctx,gosec // a test fetch from the loopback OP
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Introspection string `json:"introspection_endpoint"`
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	_ = resp.Body.Close()
	if err != nil || doc.Introspection == "" {
		t.Fatalf("the OP's discovery names no introspection endpoint: %v", err)
	}
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		form := url.Values{"token": {token}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, doc.Introspection, strings.NewReader(form.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(ZitadelClientID, ZitadelClientSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer func() { _ = resp.Body.Close() }()
		var answer struct {
			Active bool    `json:"active"`
			Sub    string  `json:"sub"`
			Exp    float64 `json:"exp"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil || !answer.Active {
			return nil, errors.Join(auth.ErrInvalidToken, err)
		}
		return &auth.TokenInfo{UserID: answer.Sub, Expiration: time.Unix(int64(answer.Exp), 0)}, nil
	}
}

// ZitadelAuthorizeAtGateway is what a person does with a URL elicitation of the
// gateway's perUser broker, in a browser of their own: opens pageURL, enters code,
// logs in at the example OP at issuer as username, and is sent back to the gateway's
// callback, whose page it returns with its status. Redirects are followed as a browser
// follows them, with cookies.
func ZitadelAuthorizeAtGateway(t testing.TB, issuer, pageURL, code, username string) (int, string) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	browser := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	// visit is a GET of u, or a POST of form to it, as the browser makes them.
	visit := func(u string, form url.Values) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u, nil)
		if form != nil {
			req, err = http.NewRequestWithContext(context.Background(), http.MethodPost, u, strings.NewReader(form.Encode()))
		}
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := browser.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	status, body := visit(pageURL, nil)
	if status != http.StatusOK || !strings.Contains(body, `name="code"`) {
		t.Fatalf("the page the person opens answered %d: %s", status, body)
	}
	status, body = visit(pageURL, url.Values{"code": {code}})
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		t.Fatalf("the code did not lead to the OP's login page: %d %s", status, body)
	}
	return visit(issuer+"login/username", url.Values{"id": {m[1]}, "username": {username}, "password": {ZitadelPassword}})
}
