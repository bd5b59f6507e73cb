package connector

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestDisplayURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pw@mcp.example.com/mcp?token=x#frag": "https://mcp.example.com:443/mcp",
		"http://10.0.0.1:8080/a%20b/c?x=1":                 "http://10.0.0.1:8080/a%20b/c",
		"http://[::1]/mcp":                                 "http://[::1]:80/mcp",
		"HTTPS://MCP.EXAMPLE.COM":                          "https://MCP.EXAMPLE.COM:443",
		"::not a url":                                      "",
	} {
		if got := DisplayURL(in); got != want {
			t.Errorf("DisplayURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzDisplayURLDropsSecrets(f *testing.F) {
	f.Add("https://u:p@h:1/p", "secret")
	f.Add("http://h/p;x", "a b")
	f.Fuzz(func(t *testing.T, base, secret string) {
		if len(secret) < 3 || strings.ContainsAny(secret, "/:@[]%") {
			return
		}
		raw := base + "?token=" + url.QueryEscape(secret) + "#" + url.QueryEscape(secret)
		u, err := url.Parse(raw)
		if err != nil || u.User != nil || strings.Contains(u.Host+u.Path, secret) {
			return
		}
		if got := DisplayURL(raw); strings.Contains(got, url.QueryEscape(secret)) || strings.Contains(got, "?") {
			t.Errorf("DisplayURL(%q) = %q leaks the query", raw, got)
		}
	})
}

func TestSecretsAreRedacted(t *testing.T) {
	cfg := Config{
		URL:     "https://user:hunter22@h/mcp?api_key=abc123&x=1",
		Headers: []Header{{Name: "Authorization", Value: "Bearer tok-en-value"}, {Name: "X-Short", Value: "ab"}},
	}
	r := newRedactor(cfg.secrets())
	msg := r.scrub(`Post "https://h/mcp?api_key=abc123&x=1": server said Bearer tok-en-value, tok-en-value, hunter22, abc123`)
	for _, secret := range []string{"abc123", "tok-en-value", "hunter22", "api_key"} {
		if strings.Contains(msg, secret) {
			t.Errorf("scrubbed message %q still holds %q", msg, secret)
		}
	}
	if long := r.scrub(strings.Repeat("é", 1000)); len(long) > maxMessageLen || !utf8.ValidString(long) {
		t.Errorf("long message not cut to %d valid bytes: %d", maxMessageLen, len(long))
	}
}

// A token endpoint's query is as secret as the server's: a failed token request's error
// prints the whole URL.
func TestTokenEndpointQueryIsRedacted(t *testing.T) {
	cfg := Config{
		URL:    "https://h/mcp",
		OAuth2: &OAuth2ClientCredentials{ClientID: "switchboard", ClientSecret: "s3cret-value", TokenURL: "https://idp/token?tenant_key=t-9931"},
	}
	r := newRedactor(cfg.secrets())
	msg := r.scrub(`Post "https://idp/token?tenant_key=t-9931": dial tcp: connection refused; s3cret-value`)
	for _, secret := range []string{"t-9931", "tenant_key", "s3cret-value"} {
		if strings.Contains(msg, secret) {
			t.Errorf("scrubbed message %q still holds %q", msg, secret)
		}
	}
}

func TestSameSessionToleratesUncomparableValues(t *testing.T) {
	a := Config{URL: "http://h", Resolver: fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}}
	if sameSession(a, a) {
		t.Error("an uncomparable resolver cannot be proven the same")
	}
	b := Config{URL: "http://h", Headers: []Header{{"A", "1"}}}
	if !sameSession(b, Config{URL: "http://h", Headers: []Header{{"A", "1"}}}) {
		t.Error("equal configs are not the same session")
	}
	if sameSession(b, Config{URL: "http://h", Headers: []Header{{"A", "2"}}}) {
		t.Error("a rotated header is the same session")
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 9: 256 * time.Second, 10: 5 * time.Minute, 60: 5 * time.Minute} {
		for range 20 {
			got := backoffDelay(n, time.Second, 5*time.Minute)
			if got < want/2 || got > want {
				t.Fatalf("backoff(%d) = %s, want within [%s, %s]", n, got, want/2, want)
			}
		}
	}
}

func TestEventLimitCountsOneEventAtATime(t *testing.T) {
	var obs observer
	body := &eventLimitBody{body: nopCloser{strings.NewReader(strings.Repeat("data: 12345678\n\n", 1000))}, max: 64, obs: &obs}
	buf := make([]byte, 100)
	for {
		if _, err := body.Read(buf); err != nil {
			break
		}
	}
	if e := obs.last(); e != nil {
		t.Errorf("small events tripped the limit: %v", e)
	}

	body = &eventLimitBody{body: nopCloser{strings.NewReader("data: " + strings.Repeat("x", 200) + "\n\n")}, max: 64, obs: &obs}
	var err error
	for err == nil {
		_, err = body.Read(buf)
	}
	if e := obs.last(); e == nil || e.Reason != ReasonLimitExceeded {
		t.Errorf("oversized event not recorded: %v", e)
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }
