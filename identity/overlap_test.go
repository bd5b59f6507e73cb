package identity

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConflicts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	idp := func(name string, age int, issuer, user, groups string) Claim {
		return Claim{Name: name, Created: t0.Add(time.Duration(-age) * time.Hour), IssuerURL: "https://" + issuer,
			UsernamePrefix: user, MapsGroups: groups != "", GroupsPrefix: groups}
	}
	introspecting := func(c Claim, tokenPrefix string) Claim {
		c.Introspects, c.TokenPrefix = true, tokenPrefix
		return c
	}
	cases := []struct {
		name   string
		claims []Claim
		// want maps each refused provider to its reason and the provider it names.
		want map[string]string
	}{
		{"apart", []Claim{idp("a", 2, "a", "a:", "a:"), idp("b", 1, "b", "b:", "b:")}, nil},
		{"one provider with one prefix for users and groups", []Claim{idp("a", 1, "a", "oidc:", "oidc:")}, nil},
		{"same username prefix: the younger is refused",
			[]Claim{idp("b", 1, "b", "oidc:", ""), idp("a", 2, "a", "oidc:", "")},
			map[string]string{"b": "PrefixConflict a"}},
		{"age, not name, decides",
			[]Claim{idp("a", 1, "a", "oidc:", ""), idp("z", 2, "z", "oidc:", "")},
			map[string]string{"a": "PrefixConflict z"}},
		{"same age: the name that sorts first wins",
			[]Claim{idp("b", 1, "b", "oidc:", ""), idp("a", 1, "a", "oidc:", "")},
			map[string]string{"b": "PrefixConflict a"}},
		{"a younger prefix the older one begins",
			[]Claim{idp("a", 2, "a", "oidc:", ""), idp("b", 1, "b", "oidc:corp:", "")},
			map[string]string{"b": "PrefixConflict a"}},
		{"a younger prefix that begins the older one",
			[]Claim{idp("a", 2, "a", "oidc:corp:", ""), idp("b", 1, "b", "oidc:", "")},
			map[string]string{"b": "PrefixConflict a"}},
		{"groups prefixes overlap",
			[]Claim{idp("a", 2, "a", "a:", "grp:"), idp("b", 1, "b", "b:", "grp:")},
			map[string]string{"b": "PrefixConflict a"}},
		{"a username prefix against a groups prefix",
			[]Claim{idp("a", 2, "a", "a:", "oidc:"), idp("b", 1, "b", "oidc:", "b:")},
			map[string]string{"b": "PrefixConflict a"}},
		{"a groups prefix against a username prefix",
			[]Claim{idp("a", 2, "a", "oidc:", "a:"), idp("b", 1, "b", "b:", "oidc:x")},
			map[string]string{"b": "PrefixConflict a"}},
		{"a groups prefix of a provider that maps no groups claims nothing",
			[]Claim{idp("a", 2, "a", "a:", ""), {Name: "b", Created: t0, IssuerURL: "https://b", UsernamePrefix: "b:", GroupsPrefix: "a:"}},
			nil},
		{"an empty groups prefix (no admission allows one) claims every group",
			[]Claim{idp("a", 2, "a", "a:", "a:"), {Name: "b", Created: t0, IssuerURL: "https://b", UsernamePrefix: "b:", MapsGroups: true}},
			map[string]string{"b": "PrefixConflict a"}},
		{"prefixes differing in case are apart, as Kubernetes names are",
			[]Claim{idp("a", 2, "a", "oidc:", ""), idp("b", 1, "b", "OIDC:", "")},
			nil},
		{"same issuer",
			[]Claim{idp("a", 2, "a", "a:", ""), idp("b", 1, "a", "b:", "")},
			map[string]string{"b": "IssuerConflict a"}},
		{"same issuer is named before overlapping prefixes",
			[]Claim{idp("a", 2, "a", "oidc:", ""), idp("b", 1, "a", "oidc:", "")},
			map[string]string{"b": "IssuerConflict a"}},
		{"the oldest of two conflicting providers is named",
			[]Claim{idp("c", 1, "c", "oidc:", ""), idp("b", 2, "b", "oidc:", ""), idp("a", 3, "a", "oidc:", "")},
			map[string]string{"b": "PrefixConflict a", "c": "PrefixConflict a"}},
		{"a refused provider still keeps younger ones out",
			[]Claim{idp("a", 3, "a", "x:", ""), idp("b", 2, "b", "y:", "x:"), idp("c", 1, "c", "y:", "")},
			map[string]string{"b": "PrefixConflict a", "c": "PrefixConflict b"}},
		{"two introspecting providers without a token prefix",
			[]Claim{introspecting(idp("a", 2, "a", "a:", ""), ""), introspecting(idp("b", 1, "b", "b:", ""), "")},
			map[string]string{"b": "TokenPrefixConflict a"}},
		{"two introspecting providers with one token prefix",
			[]Claim{introspecting(idp("a", 2, "a", "a:", ""), "at_"), introspecting(idp("b", 1, "b", "b:", ""), "at_")},
			map[string]string{"b": "TokenPrefixConflict a"}},
		{"distinct token prefixes, nested ones too, and one without",
			[]Claim{introspecting(idp("a", 3, "a", "a:", ""), "at_"), introspecting(idp("b", 2, "b", "b:", ""), "at_eu_"), introspecting(idp("c", 1, "c", "c:", ""), "")},
			nil},
		{"a token prefix of a provider that does not introspect claims nothing",
			[]Claim{idp("a", 2, "a", "a:", ""), introspecting(idp("b", 1, "b", "b:", ""), "")},
			nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Conflicts(tc.claims)
			if len(got) != len(tc.want) {
				t.Errorf("refused %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				c, ok := got[name]
				if !ok {
					t.Errorf("%s is not refused, want %s", name, want)
					continue
				}
				if g := string(c.Reason) + " " + c.With; g != want {
					t.Errorf("%s refused with %s, want %s", name, g, want)
				}
				if !strings.Contains(c.Message, "identity provider "+c.With) {
					t.Errorf("message %q does not name the older provider %s", c.Message, c.With)
				}
			}
		})
	}
}

// Two issuers whose providers map to one username prefix: the younger provider is not
// applied, so issuer B's alice is refused while A's alice is admitted; once A is
// forgotten, B can be applied. An older provider applied later displaces the younger.
func TestProvidersWithOverlappingPrefixesShareNoUser(t *testing.T) {
	a, b := newTestOP(t, true), newTestOP(t, true)
	ctx := context.Background()
	older, younger := a.config("a"), b.config("b")
	older.Created = time.Now().Add(-time.Hour)
	younger.Created = time.Now()
	ps := applied(t, fastOptions, older)

	err := ps.Apply(ctx, younger)
	var ae *ApplyError
	if !errors.As(err, &ae) || ae.Reason != ReasonPrefixConflict || !strings.Contains(err.Error(), "identity provider a") {
		t.Fatalf("Apply(b) with a's prefix: %v, want PrefixConflict naming a", err)
	}
	if ae.Permanent() {
		t.Errorf("a conflict with an applied provider is permanent; it heals when that one goes")
	}
	aliceA, aliceB := a.sign("k1", a.claims(audience)), b.sign("k1", b.claims(audience))
	refused(t, ps, aliceB, ReasonUnknownIssuer)
	if c, err := ps.Authenticate(ctx, aliceA); err != nil || c.Provider != "a" {
		t.Fatalf("a's alice: %+v, %v", c, err)
	}

	ps.Forget("a")
	if err := ps.Apply(ctx, younger); err != nil {
		t.Fatalf("Apply(b) once a is gone: %v", err)
	}
	if c, err := ps.Authenticate(ctx, aliceB); err != nil || c.Provider != "b" {
		t.Fatalf("b's alice once a is gone: %+v, %v", c, err)
	}

	// a comes back: it is older, so it takes its prefix back and b admits no one.
	if err := ps.Apply(ctx, older); err != nil {
		t.Fatalf("Apply(a) beside the younger b: %v", err)
	}
	refused(t, ps, aliceB, ReasonUnknownIssuer)
	if _, err := ps.Authenticate(ctx, aliceA); err != nil {
		t.Fatalf("a's alice after a displaced b: %v", err)
	}

	// A groups prefix that equals another's username prefix conflicts too.
	crossed := b.config("b")
	crossed.Created = younger.Created
	crossed.UsernamePrefix, crossed.GroupsPrefix = "b:", "oidc:"
	older.GroupsPrefix = "a-groups:"
	if err := ps.Apply(ctx, older); err != nil {
		t.Fatal(err)
	}
	if err := ps.Apply(ctx, crossed); !errors.As(err, &ae) || ae.Reason != ReasonPrefixConflict {
		t.Fatalf("Apply(b) whose groups prefix is a's username prefix: %v, want PrefixConflict", err)
	}
}

// A username or group that holds a control character or is not UTF-8 refuses the whole
// token: a NUL never makes one group read as two.
func TestClaimValuesWithControlCharactersAreRefused(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.introspecting())
	for name, edit := range map[string]func(map[string]any){
		"NUL in a group":        func(c map[string]any) { c["groups"] = []string{"mcp-users\x00g:oidc:admins"} },
		"NUL in the one group":  func(c map[string]any) { c["groups"] = "mcp-users\x00admins" },
		"line feed in a group":  func(c map[string]any) { c["groups"] = []string{"search", "mcp-users\nadmins"} },
		"DEL in a group":        func(c map[string]any) { c["groups"] = []string{"admins\x7f"} },
		"C1 control in a group": func(c map[string]any) { c["groups"] = []string{"admins\u0085"} },
		"NUL in the username":   func(c map[string]any) { c["email"] = "alice@example.com\x00bob" },
		"escape in the username": func(c map[string]any) {
			c["email"] = "alice\x1b[2J@example.com"
		},
	} {
		t.Run(name, func(t *testing.T) {
			claims := op.claims(audience)
			edit(claims)
			msg := refused(t, ps, op.sign("k1", claims), ReasonInvalidClaims, "admins")
			if !strings.Contains(msg, "control character") {
				t.Errorf("refusal %q does not say why", msg)
			}
			// The same claims from introspection.
			answer := activeAnswer(op, audience)
			for _, k := range []string{"email", "groups"} {
				answer[k] = claims[k]
			}
			token := "opaque-" + strings.ReplaceAll(name, " ", "-")
			op.introspects(token, answer)
			refused(t, ps, token, ReasonInvalidClaims, "admins")
		})
	}
	// Invalid UTF-8 does not decode at all.
	key := op.keys["k1"]
	bad := signRaw(t, key, "k1", func(b []byte) []byte {
		return []byte(strings.Replace(string(b), "mcp-users", "mcp-\xffusers", 1))
	}, op.claims(audience))
	refused(t, ps, bad, ReasonMalformed)
	if err := checkName("mcp-\xffusers"); err == nil {
		t.Error("checkName accepts invalid UTF-8")
	}
	// Names that are merely not ASCII pass.
	claims := op.claims(audience)
	claims["groups"] = []string{"équipe-données", "チーム"}
	if _, err := ps.Authenticate(context.Background(), op.sign("k1", claims)); err != nil {
		t.Errorf("groups in other scripts: %v", err)
	}
}

func TestCallerKeyIsUnambiguous(t *testing.T) {
	type id struct {
		user, uid string
		groups    []string
	}
	for _, pair := range [][2]id{
		{{"alice", "", []string{"a\x00g:b"}}, {"alice", "", []string{"a", "b"}}},
		{{"alice\x00", "", nil}, {"alice", "\x00", nil}},
		{{"alice", "", []string{"b"}}, {"alice", "b", nil}},
		{{"alice", "", []string{""}}, {"alice", "", nil}},
		{{"alice", "", []string{"g:x"}}, {"alice", "", []string{"x"}}},
		{{"alice\x00\x00g:x", "", nil}, {"alice", "", []string{"x"}}},
	} {
		if callerKey(pair[0].user, pair[0].uid, pair[0].groups) == callerKey(pair[1].user, pair[1].uid, pair[1].groups) {
			t.Errorf("%q and %q have one key", pair[0], pair[1])
		}
	}
	if callerKey("alice", "", []string{"b", "a", "b"}) != callerKey("alice", "", []string{"a", "b"}) {
		t.Error("the order or a repeat of groups changes the key")
	}
}

// An opaque token is introspected by the one provider whose token prefix begins it
// (longest first), else by the one without a token prefix, and never reaches another
// issuer's introspection endpoint; a token no provider takes is refused without a request.
func TestOpaqueTokenGoesToOneIntrospectionEndpoint(t *testing.T) {
	corp, eu, rest := newTestOP(t, true), newTestOP(t, true), newTestOP(t, true)
	ctx := context.Background()
	cfg := func(op *testOP, name, prefix, tokenPrefix string) ProviderConfig {
		c := op.introspecting()
		c.Name, c.UsernamePrefix, c.GroupsPrefix = name, prefix, prefix
		c.Introspection.TokenPrefix = tokenPrefix
		return c
	}
	// The catch-all sorts first by name, as the one asked first used to.
	ps := applied(t, Options{}, cfg(corp, "z-corp", "corp:", "corp_"), cfg(eu, "y-corp-eu", "eu:", "corp_eu_"))

	corpToken, euToken, otherToken := "corp_at_0123456789", "corp_eu_at_0123456789", "other-at-0123456789"
	corp.introspects(corpToken, activeAnswer(corp, audience))
	eu.introspects(euToken, activeAnswer(eu, audience))
	rest.introspects(otherToken, activeAnswer(rest, audience))

	// No provider takes the rest yet: refused, and no endpoint asked.
	refused(t, ps, otherToken, ReasonUnknownIssuer)
	if ps.Handles(otherToken) {
		t.Error("Handles an opaque token no provider introspects")
	}
	if err := ps.Apply(ctx, cfg(rest, "a-rest", "rest:", "")); err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{corpToken: "corp:alice@example.com", euToken: "eu:alice@example.com", otherToken: "rest:alice@example.com"} {
		c, err := ps.Authenticate(ctx, token)
		if err != nil || c.Username != want {
			t.Errorf("token %s: %+v, %v; want %s", token, c, err, want)
		}
	}
	// A token of one issuer that another does not know is refused by its own issuer.
	refused(t, ps, "corp_unknown", ReasonInactive)
	for op, want := range map[*testOP]int{corp: 2, eu: 1, rest: 1} {
		if _, n := op.counts(); n != want {
			t.Errorf("issuer %s was asked %d times, want %d: each token goes to one endpoint", op.issuer(), n, want)
		}
	}

	// A second provider for the rest, or for one prefix, is not applied.
	var ae *ApplyError
	second := cfg(newTestOP(t, true), "b-second", "second:", "")
	second.Created = time.Now().Add(time.Hour)
	if err := ps.Apply(ctx, second); !errors.As(err, &ae) || ae.Reason != ReasonTokenPrefixConflict || !strings.Contains(err.Error(), "a-rest") {
		t.Errorf("a second provider without a token prefix: %v, want TokenPrefixConflict naming a-rest", err)
	}
	second.Introspection.TokenPrefix = "corp_"
	if err := ps.Apply(ctx, second); !errors.As(err, &ae) || ae.Reason != ReasonTokenPrefixConflict || !strings.Contains(err.Error(), "z-corp") {
		t.Errorf("a second provider of token prefix corp_: %v, want TokenPrefixConflict naming z-corp", err)
	}
}
