package identity

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
)

// A caller printed or logged whole names its username and provider, never its extra (a
// ServiceAccount token's credential id and bound pod) or its keys.
func TestCallerPrintsAndLogsOnlyItsName(t *testing.T) {
	c := NewCaller(authenticationv1.UserInfo{
		Username: "system:serviceaccount:team-a:agent",
		UID:      "uid-7f3a",
		Groups:   []string{"system:serviceaccounts"},
		Extra: map[string]authenticationv1.ExtraValue{
			"authentication.kubernetes.io/credential-id": {"JTI=secret-jti-4711"},
			"authentication.kubernetes.io/pod-name":      {"agent-pod-0815"},
		},
	})
	c.Provider = "corp"
	c.Claims = map[string]any{"department": "secret-department-42"}
	hidden := []string{"secret-jti-4711", "agent-pod-0815", "uid-7f3a", c.Key, c.AccessKey(), "secret-department-42"}

	var texts []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		texts = append(texts, fmt.Sprintf(verb, c))
	}
	var sl bytes.Buffer
	slog.New(slog.NewJSONHandler(&sl, nil)).Info("Caller", "caller", c)
	texts = append(texts, sl.String())
	var lr []string
	funcr.NewJSON(func(obj string) { lr = append(lr, obj) }, funcr.Options{}).Info("Caller", "caller", c)
	texts = append(texts, lr...)
	js, _ := json.Marshal(c.MarshalLog())
	texts = append(texts, string(js))

	for _, text := range texts {
		if !strings.Contains(text, c.Username) {
			t.Errorf("%s does not name the caller %s", text, c.Username)
		}
		for _, h := range hidden {
			if strings.Contains(text, h) {
				t.Errorf("%s shows %q", text, h)
			}
		}
	}
}

// NewCaller's key is the same whichever way the same identity arrives, and AccessKey
// tells two tokens' extras apart while Key does not.
func TestCallerKeys(t *testing.T) {
	user := authenticationv1.UserInfo{Username: "alice", UID: "u1", Groups: []string{"b", "a", "b"}}
	a := NewCaller(user)
	user.Groups = []string{"a", "b"}
	user.Extra = map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1"}}
	b := NewCaller(user)
	if a.Key != b.Key {
		t.Errorf("one identity, two keys: %s, %s", a.Key, b.Key)
	}
	if a.AccessKey() == b.AccessKey() {
		t.Error("two extras, one access key")
	}
	if got := b.AccessReview(authorizationAttrs()).Spec; got.UID != "u1" || len(got.Extra) != 1 {
		t.Errorf("AccessReview dropped UID or extra: %+v", got)
	}
}

func authorizationAttrs() authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: "use", Resource: "mcpservers"}
}

// A caller keeps the claims an access policy may judge: strings, numbers, bools and
// lists of strings, each whole and within bounds; anything else, or beyond a bound, is
// left out rather than cut.
func TestPolicyClaimsKeepsBoundedScalarsAndStringLists(t *testing.T) {
	long := strings.Repeat("x", MaxPolicyClaimText+1)
	got := PolicyClaims(map[string]any{
		"department": "finance", "level": float64(3), "admin": false, "teams": []any{"a", "b"},
		"address": map[string]any{"city": "Oslo"}, "mixed": []any{"a", float64(1)}, "none": nil,
		"long": long, "longList": []any{"ok", long}, strings.Repeat("n", MaxPolicyClaimName+1): "v",
		"many": make([]any, MaxPolicyClaimList+1),
	})
	want := map[string]any{"department": "finance", "level": float64(3), "admin": false, "teams": []string{"a", "b"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("PolicyClaims = %v, want %v", got, want)
	}

	many := map[string]any{}
	for i := range MaxPolicyClaims + 10 {
		many[fmt.Sprintf("c%03d", i)] = "v"
	}
	if got := PolicyClaims(many); len(got) != MaxPolicyClaims {
		t.Errorf("PolicyClaims kept %d of %d claims, want at most %d", len(got), len(many), MaxPolicyClaims)
	}
	big := map[string]any{}
	for i := range 40 {
		big[fmt.Sprintf("c%02d", i)] = strings.Repeat("y", MaxPolicyClaimText)
	}
	size := 0
	for k, v := range PolicyClaims(big) {
		size += len(k) + len(v.(string))
	}
	if size > MaxPolicyClaimsBytes {
		t.Errorf("PolicyClaims kept %d bytes, want at most %d", size, MaxPolicyClaimsBytes)
	}
}
