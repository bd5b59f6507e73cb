package oauth

import (
	"encoding/base64"
	"strings"
	"testing"
)

// A token service's error description may quote the token it refused: whole, cut, or
// re-encoded. None of it survives into a message; its words do.
func TestSafeTextRedactsTokensQuotedWholeCutOrReEncoded(t *testing.T) {
	token := "zitadel-opaque-Q2xvc2VkQnlUaGVTZXJ2aWNlMDEyMzQ1Njc4OWFiY2RlZg"
	for name, quoted := range map[string]string{
		"whole":      token,
		"cut":        token[:40],
		"base64":     base64.StdEncoding.EncodeToString([]byte(token)),
		"in a JWT":   "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl",
		"url-quoted": strings.ReplaceAll(token, "-", "%2D"),
	} {
		got := SafeText("subject token "+quoted+" is not active; ask https://sts.example.com/help", 200)
		if strings.Contains(got, quoted) || strings.Contains(got, token[:32]) {
			t.Errorf("%s: the message keeps the token: %q", name, got)
		}
		if !strings.Contains(got, "is not active") || !strings.Contains(got, "https://sts.example.com/help") {
			t.Errorf("%s: the service's own words were lost: %q", name, got)
		}
	}
}
