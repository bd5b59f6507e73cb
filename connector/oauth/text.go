package oauth

import (
	"net/url"
	"strings"
	"unicode/utf8"
)

// DisplayURL prints u as scheme://host:port/path: no userinfo, no query, no fragment.
// It is how the connector's messages, these included, name URLs.
func DisplayURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	host := u.Hostname()
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return u.Scheme + "://" + host + ":" + port + u.EscapedPath()
}

// QuoteURL shows a URL a server sent, without query, or says it is none.
func QuoteURL(raw string) string {
	if raw == "" {
		return "(none)"
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not a URL)"
	}
	return TruncateUTF8(DisplayURL(u), 256)
}

// Origin prints u's origin as scheme://host:port, for messages.
func Origin(u *url.URL) string {
	d := DisplayURL(&url.URL{Scheme: u.Scheme, Host: u.Host})
	return strings.TrimSuffix(d, "/")
}

// TruncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func TruncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
