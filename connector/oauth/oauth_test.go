package oauth

import (
	"net/url"
	"testing"
)

func TestParseChallenge(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want Challenge
	}{
		{[]string{`Bearer resource_metadata="https://a/b", scope="x y"`}, Challenge{Scope: "x y", ResourceMetadata: "https://a/b"}},
		{[]string{`Basic realm="r", Bearer error="invalid_token", error_description="expired"`}, Challenge{Error: "invalid_token"}},
		{[]string{`Basic realm="r"`, `bearer error=insufficient_scope, scope="a\"b"`}, Challenge{Error: "insufficient_scope", Scope: `a"b`}},
		{[]string{`Bearer`}, Challenge{}},
		{[]string{`Newauth abc==, Bearer scope=s`}, Challenge{Scope: "s"}},
		{[]string{`garbage "`}, Challenge{}},
	} {
		if got := ParseChallenge(tc.in); got != tc.want {
			t.Errorf("ParseChallenge(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add(`Bearer resource_metadata="https://a/b", scope="x y", error="invalid_token"`)
	f.Add(`Basic realm="x", Bearer abc==, x="\"`)
	f.Fuzz(func(_ *testing.T, s string) { _ = ParseChallenge([]string{s}) })
}

func TestCanonicalResource(t *testing.T) {
	for in, want := range map[string]string{
		"HTTPS://MCP.Example.com:443/mcp/": "https://mcp.example.com/mcp",
		"http://localhost:8080/mcp?k=v":    "http://localhost:8080/mcp",
		"https://[::1]:8443":               "https://[::1]:8443",
	} {
		u, _ := url.Parse(in)
		if got := CanonicalResource(u); got != want {
			t.Errorf("CanonicalResource(%s) = %s, want %s", in, got, want)
		}
	}
}
