package egress

import "testing"

func TestHostPatternMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, host string
		want          bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "API.EXAMPLE.COM", true},
		{"API.Example.com", "api.example.com", true},
		{"api.example.com", "api.example.com.", true},
		{"api.example.com", "api.example.com..", false},
		{"api.example.com", "example.com", false},
		{"api.example.com", "xapi.example.com", false},
		{"api.example.com", "api.example.com.evil.net", false},
		{"api.example.com", "a.api.example.com", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "Api.Example.Com", true},
		{"*.example.com", "api.example.com.", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", ".example.com", false},
		{"*.example.com", "a.b.example.com", false},
		{"*.example.com", "apiexample.com", false},
		{"*.example.com", "api.example.com.evil.net", false},
		{"*.com", "example.com", true},
		{"*.com", "com", false},
		// U+212A KELVIN SIGN lower-cases to "k" under Unicode rules only.
		{"kexample.com", "\u212aexample.com", false},
		{"*.example.com", "\u212a.example.com", false},
		{"10.0.0.1", "10.0.0.1", true},
	}
	for _, tt := range tests {
		p, err := parseHostPattern(tt.pattern)
		if err != nil {
			t.Fatalf("parseHostPattern(%q): %v", tt.pattern, err)
		}
		if got := p.matches(tt.host); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.host, got, tt.want)
		}
	}
}
