package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

const audience = "https://mcp.example.com"

// fastOptions refresh the key set on every unknown key id, so rotation tests need not
// wait.
var fastOptions = Options{KeySetMinRefresh: time.Nanosecond}

func applied(t *testing.T, opts Options, cfgs ...ProviderConfig) *Providers {
	t.Helper()
	ps := NewProviders(opts)
	for _, cfg := range cfgs {
		if err := ps.Apply(context.Background(), cfg); err != nil {
			t.Fatalf("Apply(%s): %v", cfg.Name, err)
		}
	}
	return ps
}

// assertClean fails when err's message holds any of secrets.
func assertClean(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("error %q contains a secret (%.12s...)", err, s)
		}
	}
}

// refused asserts that Authenticate refused token with reason, as a 401, and that the
// error carries neither the token nor extra. It returns the error's message.
func refused(t *testing.T, ps *Providers, token string, reason Reason, extra ...string) string {
	t.Helper()
	caller, err := ps.Authenticate(context.Background(), token)
	if err == nil {
		t.Fatalf("Authenticate accepted the token as %+v, want a refusal (%s)", caller, reason)
	}
	var te *TokenError
	if !errors.As(err, &te) {
		t.Fatalf("Authenticate: %v (%T), want a *TokenError", err, err)
	}
	if te.Reason != reason {
		t.Errorf("refused with %s (%v), want %s", te.Reason, err, reason)
	}
	if !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrIssuerUnavailable) {
		t.Errorf("refusal %v is not a plain 401 (ErrUnauthenticated)", err)
	}
	assertClean(t, err, append([]string{token}, extra...)...)
	return te.Error()
}

func TestAcceptedJWTMapsPrefixedUsernameAndGroups(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.config("corp"))

	token := op.sign("k1", op.claims([]string{"someone-else", audience}))
	caller, err := ps.Authenticate(context.Background(), token)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if caller.Username != "oidc:alice@example.com" {
		t.Errorf("username %q, want oidc:alice@example.com", caller.Username)
	}
	if want := []string{"oidc:mcp-users", "oidc:search"}; !slices.Equal(caller.Groups, want) {
		t.Errorf("groups %q, want %q", caller.Groups, want)
	}
	if caller.Provider != "corp" {
		t.Errorf("provider %q, want corp", caller.Provider)
	}
	if u := caller.UserInfo(); u.Username != caller.Username || !slices.Equal(u.Groups, caller.Groups) {
		t.Errorf("UserInfo %+v does not carry the caller", u)
	}

	// Another token of the same person is the same caller for caches; another person
	// is not.
	later := op.claims(audience)
	later["iat"] = time.Now().Add(time.Second).Unix()
	again, err := ps.Authenticate(context.Background(), op.sign("k1", later))
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if again.Key != caller.Key || caller.Key == "" {
		t.Errorf("two tokens of one identity have keys %q and %q, want one", caller.Key, again.Key)
	}
	bob := op.claims(audience)
	bob["email"] = "bob@example.com"
	other, err := ps.Authenticate(context.Background(), op.sign("k1", bob))
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if other.Key == caller.Key {
		t.Error("alice and bob share a key")
	}
}

func TestValidationRulesThatHold(t *testing.T) {
	op := newTestOP(t, true)
	cfg := op.config("corp")
	cfg.ValidationRules = []ValidationRule{
		{Expression: "claims.email_verified == true"},
		{Expression: "claims.iat > 0 && claims.exp > claims.iat"},
		{Expression: `claims.groups.exists(g, g == "mcp-users")`},
		{Expression: `claims.email.endsWith("@example.com")`},
		{Expression: `!has(claims.hd) || claims.hd == "example.com"`},
	}
	ps := applied(t, Options{}, cfg)
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience))); err != nil {
		t.Fatalf("a token every rule holds for: %v", err)
	}
	c := op.claims(audience)
	c["groups"] = []string{"search"}
	if msg := refused(t, ps, op.sign("k1", c), ReasonRuleFailed); !strings.Contains(msg, "rule 2") {
		t.Errorf("a rule without a message: %q does not name the rule", msg)
	}
}

func TestJWTRefusals(t *testing.T) {
	op := newTestOP(t, true)
	rules := op.config("corp")
	rules.ValidationRules = []ValidationRule{
		{Expression: "claims.email_verified == true", Message: "email must be verified"},
		{Expression: `claims.?hd.orValue("example.com") == "example.com"`, Message: "only example.com accounts"},
	}
	ps := applied(t, fastOptions, rules)
	op.addKey("unpublished", false)
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	with := func(change func(c map[string]any)) map[string]any {
		c := op.claims(audience)
		change(c)
		return c
	}

	for _, tc := range []struct {
		name   string
		token  string
		reason Reason
		msg    string // in the error, when set
	}{
		{"wrong audience", op.sign("k1", op.claims("https://evil.example.com")), ReasonWrongAudience, ""},
		{"expired", op.sign("k1", with(func(c map[string]any) { c["exp"] = time.Now().Add(-time.Minute).Unix() })), ReasonExpired, ""},
		{"no exp", op.sign("k1", with(func(c map[string]any) { delete(c, "exp") })), ReasonExpired, ""},
		{"not yet valid", op.sign("k1", with(func(c map[string]any) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), ReasonNotYetValid, ""},
		{"unknown issuer", op.sign("k1", with(func(c map[string]any) { c["iss"] = "https://login.evil.example.com" })), ReasonUnknownIssuer, ""},
		{"issuer with trailing slash", op.sign("k1", with(func(c map[string]any) { c["iss"] = op.issuer() + "/" })), ReasonUnknownIssuer, ""},
		{"key the issuer never published", op.sign("unpublished", op.claims(audience)), ReasonBadSignature, ""},
		{"stranger's key under a published kid", signWith(t, stranger, "k1", op.claims(audience)), ReasonBadSignature, ""},
		{"stranger's key without kid", signWith(t, stranger, "", op.claims(audience)), ReasonBadSignature, ""},
		{"failed rule", op.sign("k1", with(func(c map[string]any) { c["hd"] = "evil.example.com" })), ReasonRuleFailed, "only example.com accounts"},
		{"rule on a claim of the wrong type", op.sign("k1", with(func(c map[string]any) { c["hd"] = 42 })), ReasonRuleFailed, "only example.com accounts"},
		{"email not verified", op.sign("k1", with(func(c map[string]any) { c["email_verified"] = false })), ReasonInvalidClaims, "not verified"},
		{"no username claim", op.sign("k1", with(func(c map[string]any) { delete(c, "email") })), ReasonInvalidClaims, ""},
		{"empty username", op.sign("k1", with(func(c map[string]any) { c["email"] = "" })), ReasonInvalidClaims, ""},
		{"username not a string", op.sign("k1", with(func(c map[string]any) { c["email"] = []string{"a"} })), ReasonInvalidClaims, ""},
		{"groups not strings", op.sign("k1", with(func(c map[string]any) { c["groups"] = []any{"a", 1} })), ReasonInvalidClaims, ""},
		{"duplicate claim", dupClaimToken(t, op), ReasonMalformed, ""},
		{"claim differing in case", op.sign("k1", with(func(c map[string]any) { c["ISS"] = "https://other.example.com" })), ReasonMalformed, ""},
		{"not a JWT", "a.b.c", ReasonMalformed, ""},
		{"HS256 JWT", hs256Token(t, op.claims(audience)), ReasonMalformed, ""},
		{"empty", "", ReasonMalformed, ""},
		{"too long", strings.Repeat("x", 20<<10), ReasonMalformed, ""},
		{"opaque without introspection", "opaque-token-value", ReasonUnknownIssuer, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := refused(t, ps, tc.token, tc.reason, "alice@example.com", "evil.example.com", "248289761001")
			if tc.msg != "" && !strings.Contains(msg, tc.msg) {
				t.Errorf("error %q does not say %q", msg, tc.msg)
			}
		})
	}
}

// dupClaimToken signs a payload with "email" twice: readers disagree on which counts.
func dupClaimToken(t *testing.T, op *testOP) string {
	t.Helper()
	op.mu.Lock()
	key := op.keys["k1"]
	op.mu.Unlock()
	c := op.claims(audience)
	delete(c, "email")
	return signRaw(t, key, "k1", func(b []byte) []byte {
		return append(b[:len(b)-1], []byte(`,"email":"alice@example.com","email":"admin@example.com"}`)...)
	}, c)
}

func TestReservedNamesAreRefused(t *testing.T) {
	op := newTestOP(t, true)
	// A prefix that is harmless alone makes "system:" with the claim's value.
	user := op.config("user")
	user.UsernamePrefix = "sys"
	ps := applied(t, Options{}, user)
	c := op.claims(audience)
	c["email"] = "tem:masters"
	refused(t, ps, op.sign("k1", c), ReasonReservedName)

	ps.Forget("user")
	groups := op.config("groups")
	groups.GroupsPrefix = ""
	if err := ps.Apply(context.Background(), groups); err != nil {
		t.Fatal(err)
	}
	c = op.claims(audience)
	c["groups"] = []string{"mcp-users", "system:masters"}
	refused(t, ps, op.sign("k1", c), ReasonReservedName)

	bad := op.config("bad")
	bad.UsernamePrefix = "system:oidc:"
	var ae *ApplyError
	if err := NewProviders(Options{}).Apply(context.Background(), bad); !errors.As(err, &ae) || ae.Reason != ReasonInvalidConfig || ae.Transient {
		t.Errorf("Apply with a system: prefix: %v, want a lasting InvalidConfig", err)
	}
}

func TestForgottenProviderAdmitsNoOne(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.config("corp"))
	token := op.sign("k1", op.claims(audience))
	if _, err := ps.Authenticate(context.Background(), token); err != nil {
		t.Fatalf("Authenticate before Forget: %v", err)
	}
	ps.Forget("corp")
	refused(t, ps, token, ReasonUnknownIssuer)
	if got := ps.Advertised(); len(got) != 0 {
		t.Errorf("Advertised after Forget: %q", got)
	}
}

func TestVerifiedJWTsAreNotRememberedPastExp(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{VerifiedJWTTTL: time.Hour}, op.config("corp"))
	c := op.claims(audience)
	c["exp"] = time.Now().Add(2 * time.Second).Unix()
	token := op.sign("k1", c)
	if _, err := ps.Authenticate(context.Background(), token); err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, "a remembered token to end with its exp", func() error {
		_, err := ps.Authenticate(context.Background(), token)
		if err == nil {
			return errors.New("Authenticate passes the token")
		}
		if !errors.Is(err, ErrUnauthenticated) {
			return fmt.Errorf("Authenticate answers %w, want ErrUnauthenticated", err)
		}
		return nil
	})
	refused(t, ps, token, ReasonExpired)
}

func TestFailedApplyAdmitsNoOne(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.config("corp"))
	token := op.sign("k1", op.claims(audience))
	broken := op.config("corp")
	broken.ValidationRules = []ValidationRule{{Expression: "claims.email =="}}
	if err := ps.Apply(context.Background(), broken); err == nil {
		t.Fatal("Apply with a rule that does not compile succeeded")
	}
	refused(t, ps, token, ReasonUnknownIssuer)
}

func TestKeyRotation(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, fastOptions, op.config("corp"))
	op.addKey("k2", false)
	token := op.sign("k2", op.claims(audience))
	refused(t, ps, token, ReasonBadSignature)

	op.publish("k2")
	// As above: a verification just after the previous one's fetch reuses its keys.
	var caller *Caller
	testutil.Eventually(t, 5*time.Second, "a token signed with a key published after Apply to pass", func() (err error) {
		caller, err = ps.Authenticate(context.Background(), token)
		return err
	})
	if caller.Username != "oidc:alice@example.com" {
		t.Errorf("username %q", caller.Username)
	}
	// The old key stays good while it is published.
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience))); err != nil {
		t.Errorf("a token of the first key after rotation: %v", err)
	}
}

func TestUnknownKeyIDsDoNotFloodTheIssuer(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{KeySetMinRefresh: time.Hour}, op.config("corp"))
	before, _ := op.counts()
	for i := range 50 {
		kid := fmt.Sprintf("made-up-%d", i)
		op.addKey(kid, false)
		refused(t, ps, op.sign(kid, op.claims(audience)), ReasonBadSignature)
	}
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience))); err != nil {
		t.Fatalf("a good token after the flood: %v", err)
	}
	if after, _ := op.counts(); after != before {
		t.Errorf("50 tokens with unknown key ids fetched the key set %d times, want none within KeySetMinRefresh", after-before)
	}
}

func TestKeySetUnreachableIsUnavailable(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, fastOptions, op.config("corp"))
	op.setKeysDown(true)
	op.addKey("k2", true)
	token := op.sign("k2", op.claims(audience))
	// go-oidc hands a verification that starts just as a fetch ends that fetch's keys
	// (a window of microseconds after Apply's): the next one fetches.
	testutil.Eventually(t, 5*time.Second, "a new key to be refused as the issuer being unavailable", func() error {
		_, err := ps.Authenticate(context.Background(), token)
		if !errors.Is(err, ErrIssuerUnavailable) || errors.Is(err, ErrUnauthenticated) {
			return fmt.Errorf("a new key while the key set is down: %w, want ErrIssuerUnavailable (503)", err)
		}
		return nil
	})
	// Tokens of keys already known still pass.
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience))); err != nil {
		t.Errorf("a known key while the key set is down: %v", err)
	}
}

func TestRoutingByIssuerAsksOneProvider(t *testing.T) {
	a, b := newTestOP(t, true), newTestOP(t, true)
	cfgB := b.config("b")
	cfgB.UsernamePrefix, cfgB.GroupsPrefix = "b:", "b:" // two providers never share a prefix
	ps := applied(t, fastOptions, a.config("a"), cfgB)
	if got, want := ps.Advertised(), []string{a.issuer(), b.issuer()}; !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("Advertised %q, want %q", got, want)
	}
	_, beforeB := b.counts()
	jwksB, _ := b.counts()
	// b's key, a's issuer: judged by a alone, whose key set does not hold it.
	b.addKey("kb", true)
	forged := b.sign("kb", a.claims(audience))
	refused(t, ps, forged, ReasonBadSignature)
	if jwks, intro := b.counts(); jwks != jwksB || intro != beforeB {
		t.Error("a token naming a's issuer made requests to b")
	}
	caller, err := ps.Authenticate(context.Background(), b.sign("k1", b.claims(audience)))
	if err != nil || caller.Provider != "b" {
		t.Fatalf("b's token: %+v, %v", caller, err)
	}
}

func TestApplyErrors(t *testing.T) {
	op := newTestOP(t, true)
	plain := newTestOP(t, false)
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		cfg       func() ProviderConfig
		reason    Reason
		transient bool
		says      string
	}{
		{"http issuer without allowInsecureHTTP", func() ProviderConfig {
			c := plain.config("p")
			c.CACertPEM = nil
			return c
		}, ReasonInvalidConfig, false, "allowInsecureHTTP"},
		{"http issuer off loopback", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL, c.AllowInsecureHTTP = "http://10.1.2.3", true
			return c
		}, ReasonInvalidConfig, false, "loopback"},
		{"metadata address", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = "https://169.254.169.254"
			return c
		}, ReasonAddressRefused, false, "metadata"},
		{"link-local address", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = "https://169.254.10.10:8443"
			return c
		}, ReasonAddressRefused, false, "link-local"},
		{"IPv6 metadata address", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = "https://[fd00:ec2::254]"
			return c
		}, ReasonAddressRefused, false, "metadata"},
		{"Alibaba metadata address", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = "https://100.100.100.200"
			return c
		}, ReasonAddressRefused, false, "metadata"},
		{"IPv6 link-local", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = "https://[fe80::1]"
			return c
		}, ReasonAddressRefused, false, "link-local"},
		{"issuer differs from discovery", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL += "/"
			return c
		}, ReasonDiscoveryFailed, false, "exactly"},
		{"untrusted certificate", func() ProviderConfig {
			c := op.config("p")
			c.CACertPEM = nil // the system roots do not know the test CA
			return c
		}, ReasonDiscoveryFailed, true, "certificate"},
		{"certificate authority not PEM", func() ProviderConfig {
			c := op.config("p")
			c.CACertPEM = []byte("not pem")
			return c
		}, ReasonInvalidConfig, false, "PEM"},
		{"rule does not compile", func() ProviderConfig {
			c := op.config("p")
			c.ValidationRules = []ValidationRule{{Expression: "true"}, {Expression: "claims.email =="}}
			return c
		}, ReasonInvalidConfig, false, "rule 1"},
		{"rule not bool", func() ProviderConfig {
			c := op.config("p")
			c.ValidationRules = []ValidationRule{{Expression: `"yes"`}}
			return c
		}, ReasonInvalidConfig, false, "rule 0"},
		{"no audience", func() ProviderConfig {
			c := op.config("p")
			c.Audiences = nil
			return c
		}, ReasonInvalidConfig, false, "audience"},
		{"no username claim", func() ProviderConfig {
			c := op.config("p")
			c.UsernameClaim = ""
			return c
		}, ReasonInvalidConfig, false, "username claim"},
		{"unreachable issuer", func() ProviderConfig {
			c := op.config("p")
			c.IssuerURL = closedURL(t)
			return c
		}, ReasonDiscoveryFailed, true, "discovery"},
		{"introspection without credentials", func() ProviderConfig {
			c := op.config("p")
			c.Introspection = &Introspection{ClientID: "x"}
			return c
		}, ReasonInvalidConfig, false, "client secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := NewProviders(Options{Timeout: 5 * time.Second}).Apply(ctx, tc.cfg())
			var ae *ApplyError
			if !errors.As(err, &ae) {
				t.Fatalf("Apply: %v, want an *ApplyError", err)
			}
			if ae.Reason != tc.reason || ae.Transient != tc.transient {
				t.Errorf("Apply: %s (transient %v): %v; want %s (transient %v)", ae.Reason, ae.Transient, err, tc.reason, tc.transient)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Apply: %q does not say %q", err, tc.says)
			}
			assertClean(t, err, op.clientSecret)
		})
	}
}

func TestInsecureHTTPToLoopbackWithTheFlag(t *testing.T) {
	op := newTestOP(t, false)
	cfg := op.config("dev")
	cfg.CACertPEM = nil
	cfg.AllowInsecureHTTP = true
	ps := applied(t, Options{}, cfg)
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience))); err != nil {
		t.Fatalf("a token of a loopback http issuer with allowInsecureHTTP: %v", err)
	}
}

func TestIssuerConflict(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.config("first"))
	var ae *ApplyError
	if err := ps.Apply(context.Background(), op.config("second")); !errors.As(err, &ae) || ae.Reason != ReasonIssuerConflict {
		t.Fatalf("a second provider with the same issuer: %v, want IssuerConflict", err)
	}
	caller, err := ps.Authenticate(context.Background(), op.sign("k1", op.claims(audience)))
	if err != nil || caller.Provider != "first" {
		t.Fatalf("after the conflict: %+v, %v; want the first provider to stay", caller, err)
	}
}

// An issuer that serves its discovery document somewhere other than its well-known
// location is usable with DiscoveryURL, which must still name the issuer; without
// DiscoveryURL it is not.
func TestDiscoveryURLFetchesTheDocumentFromElsewhere(t *testing.T) {
	op := newTestOP(t, true)
	const elsewhere = "/elsewhere/openid.json"
	op.wrap(func(own http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/.well-known/openid-configuration":
				http.NotFound(w, r)
			case elsewhere:
				r.URL.Path = "/.well-known/openid-configuration"
				own.ServeHTTP(w, r)
			default:
				own.ServeHTTP(w, r)
			}
		})
	})
	ctx := context.Background()
	var ae *ApplyError
	if err := NewProviders(Options{}).Apply(ctx, op.config("p")); !errors.As(err, &ae) || ae.Reason != ReasonDiscoveryFailed {
		t.Fatalf("Apply without a discovery URL, the well-known location answering 404: %v, want %s", err, ReasonDiscoveryFailed)
	}

	cfg := op.config("p")
	cfg.DiscoveryURL = op.issuer() + elsewhere
	ps := applied(t, Options{}, cfg)
	if _, err := ps.Authenticate(ctx, op.sign("k1", op.claims(audience))); err != nil {
		t.Fatalf("a token of an issuer whose discovery document is at the discovery URL: %v", err)
	}

	// A document at the discovery URL must name the configured issuer.
	cfg.IssuerURL += "/other"
	err := NewProviders(Options{}).Apply(ctx, cfg)
	if !errors.As(err, &ae) || ae.Reason != ReasonDiscoveryFailed || !strings.Contains(err.Error(), "exactly") {
		t.Fatalf("Apply with a discovery document naming another issuer: %v, want %s saying the issuer must match exactly", err, ReasonDiscoveryFailed)
	}

	// The discovery URL obeys the issuer URL's scheme rules.
	cfg = op.config("p")
	cfg.DiscoveryURL = "http://10.1.2.3/openid.json"
	cfg.AllowInsecureHTTP = true
	if err := NewProviders(Options{}).Apply(ctx, cfg); !errors.As(err, &ae) || ae.Reason != ReasonInvalidConfig || !strings.Contains(err.Error(), "discovery URL") {
		t.Fatalf("Apply with a plain http discovery URL off loopback: %v, want %s naming the discovery URL", err, ReasonInvalidConfig)
	}
}
