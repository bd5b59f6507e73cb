package userauth_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway/userauth"
	"github.com/switchboard-mcp/switchboard/internal/usergrants"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	var env *testenv.Environment
	os.Exit(testenv.Main(m, &env, &k8sClient))
}

// rig is a broker in front of zitadel/oidc's example OP acting as an MCP server's own
// authorization server ("the vendor"), with grants and flows in Secrets of a namespace
// of a real API server.
type rig struct {
	t       *testing.T
	issuer  string
	ns      string
	server  connector.Key
	store   *usergrants.Store
	broker  *userauth.Broker
	auth    *connector.UserAuthorizer
	cfg     connector.Config
	logs    *syncBuffer
	clock   *clock
	mu      sync.Mutex
	done    []userauth.Completed
	gateway *httptest.Server
}

type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return time.Now().Add(c.off) }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newRig(t *testing.T) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{t: t, server: connector.Key{Namespace: "team-a", Name: "vendor"}, logs: &syncBuffer{}, clock: &clock{}}

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "userauth-"}}
	if err := k8sClient.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	r.ns = nsObj.Name
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if err := k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grant-keys", Namespace: r.ns}, Data: map[string][]byte{"k1": key}}); err != nil {
		t.Fatal(err)
	}
	keys := &usergrants.SecretKeys{Reader: k8sClient, Secret: types.NamespacedName{Namespace: r.ns, Name: "grant-keys"}}
	blobs := &usergrants.Blobs{Client: k8sClient, Namespace: r.ns}
	r.store = &usergrants.Store{Blobs: blobs, Keys: keys}

	// The gateway's listener, where the broker's pages are.
	mux := http.NewServeMux()
	r.gateway = httptest.NewServer(mux)
	t.Cleanup(r.gateway.Close)
	r.issuer = testenv.StartZitadelOPWithAdminsRedirectingTo(t, r.gateway.URL+userauth.CallbackPath)

	// The MCP server: its protected resource metadata names the OP.
	var resource *httptest.Server
	resource = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"resource": resource.URL + "/mcp", "authorization_servers": []string{r.issuer}})
			return
		}
		http.NotFound(w, req)
	}))
	t.Cleanup(resource.Close)

	r.cfg = connector.Config{URL: resource.URL + "/mcp", Timeout: 10 * time.Second, PerUser: &connector.PerUser{
		Provider: "corp", ClientID: testenv.ZitadelClientID, ClientSecret: testenv.ZitadelClientSecret,
		Scopes:               []string{"openid", "offline_access"},
		AuthorizationServers: []string{r.issuer}, Resources: []string{resource.URL},
		AllowInsecureHTTP: true,
	}}
	r.auth = r.newAuthorizer()
	r.broker = &userauth.Broker{
		PublicURL: r.gateway.URL, Flows: blobs, Keys: keys, Grants: r.store,
		Authorizer: func(k connector.Key) *connector.UserAuthorizer {
			if k == r.server {
				return r.auth
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(r.logs, nil)),
		Now:    r.clock.now,
	}
	r.broker.OnComplete(func(c userauth.Completed) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.done = append(r.done, c)
	})
	mux.Handle("/oauth2/", r.broker.Handler())
	return r
}

// newAuthorizer is the connector's authorizer of the server as another replica (or
// the manager after a restart) has it: nothing in memory, everything from the store.
func (r *rig) newAuthorizer() *connector.UserAuthorizer {
	a, e := connector.NewUserAuthorizer(context.Background(), r.server, r.cfg, r.store)
	if e != nil {
		r.t.Fatal(e)
	}
	r.t.Cleanup(a.Close)
	return a
}

// browser is a person's browser: cookies, redirects followed, except (when stop is
// set) the one back to the gateway's callback, whose URL it returns instead.
type browser struct {
	c        *http.Client
	callback string
}

func (r *rig) newBrowser(stopAtCallback bool) *browser {
	jar, _ := cookiejar.New(nil)
	b := &browser{}
	b.c = &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if stopAtCallback && strings.HasPrefix(req.URL.String(), r.gateway.URL+userauth.CallbackPath) {
			b.callback = req.URL.String()
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

func (b *browser) get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// answer is what a browser got: status, headers and body (read and closed).
type answer struct {
	StatusCode int
	Header     http.Header
}

func (b *browser) post(t *testing.T, u string, form url.Values) (*answer, string) {
	t.Helper()
	resp, err := b.c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return &answer{StatusCode: resp.StatusCode, Header: resp.Header}, string(body)
}

// authorize is what the person does: opens the URL, enters the code, logs in at the
// OP as username. It returns the last response's status and body (the callback's page,
// or, for a browser that stops there, the OP's redirect).
func (r *rig) authorize(b *browser, s *userauth.Started, username string) (int, string) {
	t := r.t
	t.Helper()
	status, body := b.get(t, s.URL)
	if status != http.StatusOK || !strings.Contains(body, `name="code"`) {
		t.Fatalf("the page the person opens: %d %s", status, body)
	}
	resp, body := b.post(t, s.URL, url.Values{"code": {strings.ToLower(s.Code)}})
	return r.login(b, resp, body, username)
}

// login fills in the OP's login page the browser is on.
func (r *rig) login(b *browser, resp *answer, body, username string) (int, string) {
	t := r.t
	t.Helper()
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("the code did not lead to the OP's login page: %d %s", resp.StatusCode, body)
	}
	resp, body = b.post(t, r.issuer+"login/username", url.Values{"id": {m[1]}, "username": {username}, "password": {testenv.ZitadelPassword}})
	return resp.StatusCode, body
}

// subject asks the OP who token belongs to, as the MCP server would (introspection).
func (r *rig) subject(token string) string {
	r.t.Helper()
	info, err := testenv.ZitadelTokenVerifier(r.t, r.issuer)(context.Background(), token, nil)
	if err != nil {
		r.t.Fatalf("the OP does not know the token: %v", err)
	}
	return info.UserID
}

func (r *rig) noGrant(who connector.Caller) {
	r.t.Helper()
	if g, err := r.store.LoadGrant(context.Background(), connector.GrantKey{Caller: who.Key, Server: r.server}); !errors.Is(err, connector.ErrNoGrant) {
		r.t.Fatalf("a grant was stored for %s: %v %v", who.Key, g, err)
	}
}

var (
	alice = connector.Caller{Key: "key-of-alice", Provider: "corp"}
	bob   = connector.Caller{Key: "key-of-bob", Provider: "corp"}
)

func requireAuthorization(t *testing.T, a *connector.UserAuthorizer, c connector.Caller) {
	t.Helper()
	tok, e := a.Token(context.Background(), c)
	if e == nil || e.Reason != connector.ReasonAuthorizationRequired {
		t.Fatalf("caller %s without a grant got %q %v, want %s", c.Key, tok, e, connector.ReasonAuthorizationRequired)
	}
}

func TestEachPersonAuthorizesAtTheRealOPAndGetsTheirOwnToken(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	requireAuthorization(t, r.auth, alice)

	var secrets []string
	tokens := map[string]string{}
	for _, p := range []struct {
		caller   connector.Caller
		username string
	}{{alice, "alice@127.0.0.1"}, {bob, "bob@127.0.0.1"}} {
		s, err := r.broker.Start(ctx, p.caller, "oidc:"+p.username, r.server)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, s.Code, strings.TrimPrefix(s.URL, r.gateway.URL+userauth.AuthorizePath))
		if !strings.Contains(s.Message, s.Code) || !strings.HasPrefix(s.URL, r.gateway.URL+"/oauth2/authorize/") {
			t.Fatalf("the elicitation: %+v", s)
		}
		status, body := r.authorize(r.newBrowser(false), s, p.username)
		if status != http.StatusOK || !strings.Contains(body, "Authorized") {
			t.Fatalf("%s's callback: %d %s", p.username, status, body)
		}
		r.mu.Lock()
		last := r.done[len(r.done)-1]
		r.mu.Unlock()
		if last != (userauth.Completed{ElicitationID: s.ElicitationID, CallerKey: p.caller.Key, Server: r.server}) {
			t.Fatalf("OnComplete got %+v", last)
		}
		tok, e := r.auth.Token(ctx, p.caller)
		if e != nil {
			t.Fatal(e)
		}
		tokens[p.caller.Key] = tok
		secrets = append(secrets, tok)
		want, _, _ := strings.Cut(p.username, "@")
		if got := r.subject(tok); got != want {
			t.Fatalf("%s's token belongs to %q at the OP", p.username, got)
		}
	}
	if tokens[alice.Key] == tokens[bob.Key] {
		t.Fatal("alice and bob got the same token")
	}

	// Another replica, or the manager after a restart: the grants are in the store.
	other := r.newAuthorizer()
	for _, c := range []connector.Caller{alice, bob} {
		if tok, e := other.Token(ctx, c); e != nil || tok != tokens[c.Key] {
			t.Fatalf("another replica serves %s %v, want their own token", c.Key, e)
		}
	}

	// Refresh: a token the server refused is replaced with a refreshed one of the same
	// person, stored for every replica.
	refreshed, e := r.auth.Renew(ctx, alice, tokens[alice.Key])
	if e != nil {
		t.Fatal(e)
	}
	if refreshed == tokens[alice.Key] || r.subject(refreshed) != "alice" {
		t.Fatal("the refresh did not give alice a new token of her own")
	}
	secrets = append(secrets, refreshed)
	if g, err := r.store.LoadGrant(ctx, connector.GrantKey{Caller: alice.Key, Server: r.server}); err != nil || g.AccessToken != refreshed {
		t.Fatalf("the refreshed token was not stored: %v", err)
	}

	// A refresh the authorization server refuses removes the grant: bob authorizes again.
	g, err := r.store.LoadGrant(ctx, connector.GrantKey{Caller: bob.Key, Server: r.server})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, g.RefreshToken)
	g.RefreshToken, g.Expiry = "refresh-token-the-op-never-issued", time.Now().Add(-time.Minute)
	if err := r.store.SaveGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	requireAuthorization(t, r.newAuthorizer(), bob)
	r.noGrant(bob)

	// The admin's list names whose grants exist; the person revokes theirs.
	infos, err := r.broker.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Username != "oidc:alice@127.0.0.1" || infos[0].Server != "team-a/vendor" {
		t.Fatalf("admin list: %+v", infos)
	}
	if err := r.broker.Revoke(ctx, alice.Key, r.server); err != nil {
		t.Fatal(err)
	}
	requireAuthorization(t, r.auth, alice)
	r.noGrant(alice)

	// Nothing secret in the Secrets, nor in the logs.
	var list corev1.SecretList
	if err := k8sClient.List(ctx, &list, client.InNamespace(r.ns)); err != nil {
		t.Fatal(err)
	}
	var stored strings.Builder
	for _, s := range list.Items {
		stored.WriteString(s.String())
	}
	for _, s := range secrets {
		if strings.Contains(stored.String(), s) {
			t.Errorf("a Secret holds a token, code or link in the clear")
		}
		if strings.Contains(r.logs.String(), s) {
			t.Errorf("the logs hold a token, code or link: %s", r.logs.String())
		}
	}
	t.Logf("logs:\n%s", r.logs.String())
}

func TestServiceAccountCallersAreToldWhatAnAdminCanDo(t *testing.T) {
	r := newRig(t)
	_, err := r.broker.Start(context.Background(), connector.Caller{Key: "sa-key"}, "system:serviceaccount:team-a:agent", r.server)
	if err == nil || !strings.Contains(err.Error(), "workloadIdentity") || !strings.Contains(err.Error(), "ServiceAccount") {
		t.Fatalf("a ServiceAccount caller got %v, want a refusal naming a workload credential", err)
	}
	_, err = r.broker.Start(context.Background(), connector.Caller{Key: "other-key", Provider: "elsewhere"}, "x:carol", r.server)
	if err == nil || !strings.Contains(err.Error(), connector.ReasonCallerNotAllowed) {
		t.Fatalf("another provider's caller got %v, want %s", err, connector.ReasonCallerNotAllowed)
	}
}

func TestHostileCallbacksAreRefusedAndStoreNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	start := func() *userauth.Started {
		s, err := r.broker.Start(ctx, alice, "oidc:alice@127.0.0.1", r.server)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("another browser brings alice's state back", func(t *testing.T) {
		a := r.newBrowser(true)
		r.authorize(a, start(), "alice@127.0.0.1")
		if a.callback == "" {
			t.Fatal("the OP did not redirect to the callback")
		}
		// bob (or whoever got hold of the callback URL) brings it to the gateway.
		status, body := r.newBrowser(false).get(t, a.callback)
		if status != http.StatusForbidden || !strings.Contains(body, "did not start this authorization") {
			t.Fatalf("got %d %s", status, body)
		}
		r.noGrant(alice)
		r.noGrant(bob)
	})

	t.Run("a mismatched issuer", func(t *testing.T) {
		a := r.newBrowser(true)
		r.authorize(a, start(), "alice@127.0.0.1")
		u, _ := url.Parse(a.callback)
		q := u.Query()
		q.Set("iss", "https://evil.example.test")
		u.RawQuery = q.Encode()
		status, body := a.get(t, u.String())
		if status != http.StatusBadGateway || !strings.Contains(body, "RFC 9207") {
			t.Fatalf("got %d %s", status, body)
		}
		r.noGrant(alice)
	})

	t.Run("a replayed callback", func(t *testing.T) {
		a := r.newBrowser(true)
		r.authorize(a, start(), "alice@127.0.0.1")
		if status, body := a.get(t, a.callback); status != http.StatusOK {
			t.Fatalf("the first callback: %d %s", status, body)
		}
		if err := r.broker.Revoke(ctx, alice.Key, r.server); err != nil {
			t.Fatal(err)
		}
		status, body := a.get(t, a.callback)
		if status != http.StatusGone || !strings.Contains(body, "used already") {
			t.Fatalf("the replay: %d %s", status, body)
		}
		r.noGrant(alice)
	})

	t.Run("an expired link and an expired callback", func(t *testing.T) {
		s, unopened := start(), start()
		a := r.newBrowser(true)
		r.authorize(a, s, "alice@127.0.0.1")
		r.clock.advance(userauth.DefaultFlowLife + time.Second)
		defer r.clock.advance(-userauth.DefaultFlowLife - time.Second)
		status, body := a.get(t, a.callback)
		if status != http.StatusGone || !strings.Contains(body, "expired") {
			t.Fatalf("an expired callback: %d %s", status, body)
		}
		status, body = a.get(t, unopened.URL)
		if status != http.StatusGone || !strings.Contains(body, "expired") {
			t.Fatalf("an expired link: %d %s", status, body)
		}
		r.noGrant(alice)
	})

	t.Run("a code issued to another client", func(t *testing.T) {
		s := start()
		a := r.newBrowser(true)
		a.c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if status, _ := a.get(t, s.URL); status != http.StatusOK {
			t.Fatal(status)
		}
		resp, _ := a.post(t, s.URL, url.Values{"code": {s.Code}})
		authURL, err := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || err != nil || !strings.HasPrefix(authURL.String(), r.issuer) {
			t.Fatalf("the code page did not send the browser to the OP: %d", resp.StatusCode)
		}
		// The browser goes to the OP as the OP's other client, "native".
		q := authURL.Query()
		q.Set("client_id", "native")
		authURL.RawQuery = q.Encode()
		a.c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
			if strings.HasPrefix(req.URL.String(), r.gateway.URL+userauth.CallbackPath) {
				a.callback = req.URL.String()
				return http.ErrUseLastResponse
			}
			return nil
		}
		resp2, err := a.c.Get(authURL.String())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp2.Body)
		resp2.Body.Close()
		r.login(a, &answer{StatusCode: resp2.StatusCode, Header: resp2.Header}, string(body), "alice@127.0.0.1")
		if a.callback == "" {
			t.Fatal("the OP did not redirect to the callback")
		}
		status, page := a.get(t, a.callback)
		if status != http.StatusBadGateway || !strings.Contains(page, "token endpoint") {
			t.Fatalf("a code of another client: %d %s", status, page)
		}
		r.noGrant(alice)
	})

	t.Run("wrong codes end the link", func(t *testing.T) {
		s := start()
		a := r.newBrowser(false)
		for i := range 5 {
			resp, _ := a.post(t, s.URL, url.Values{"code": {"AAAA-AAAA"}})
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("wrong code %d: %d", i, resp.StatusCode)
			}
		}
		if status, _ := a.get(t, s.URL); status != http.StatusGone {
			t.Fatalf("after five wrong codes the link answers %d", status)
		}
	})
	t.Logf("logs:\n%s", r.logs.String())
}

// A person's calls before they open the link (a tools/list, a retry, another session's
// call) are offered the same link and code, not one more authorization each; once the
// person entered the code (their browser is at the authorization server) or the flow
// is gone, a call starts a new one. Another person is never offered theirs.
func TestAPersonIsOfferedTheSameLinkUntilTheyUseIt(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	first, err := r.broker.Start(ctx, alice, "oidc:alice", r.server)
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.broker.Start(ctx, alice, "oidc:alice", r.server)
	if err != nil {
		t.Fatal(err)
	}
	if *again != *first {
		t.Fatalf("alice's second call was offered %+v; want the link she has not used yet", again)
	}
	theirs, err := r.broker.Start(ctx, bob, "oidc:bob", r.server)
	if err != nil {
		t.Fatal(err)
	}
	if theirs.URL == first.URL || theirs.Code == first.Code || theirs.ElicitationID == first.ElicitationID {
		t.Fatal("bob was offered alice's authorization")
	}
	// alice enters the code: her browser is sent to the authorization server.
	b := r.newBrowser(true)
	if status, _ := b.get(t, first.URL); status != http.StatusOK {
		t.Fatalf("alice's page: %d", status)
	}
	resp, _ := b.post(t, first.URL, url.Values{"code": {first.Code}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("alice's code: %d", resp.StatusCode)
	}
	next, err := r.broker.Start(ctx, alice, "oidc:alice", r.server)
	if err != nil {
		t.Fatal(err)
	}
	if next.URL == first.URL || next.Code == first.Code {
		t.Fatal("a link alice's browser already used was offered again")
	}
	// Near its expiry a link is not offered again either.
	r.clock.advance(userauth.DefaultFlowLife - time.Minute)
	if last, err := r.broker.Start(ctx, alice, "oidc:alice", r.server); err != nil || last.URL == next.URL {
		t.Fatalf("a link about to expire was offered again (%v)", err)
	}
}
