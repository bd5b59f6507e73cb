package identity

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// userReviews is a TokenReview client that authenticates every token as user.
type userReviews struct {
	authenticationv1client.TokenReviewInterface
	user authenticationv1.UserInfo
}

func (f *userReviews) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	out := tr.DeepCopy()
	out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: f.user}
	return out, nil
}

// One Kubernetes identity has one key whether TokenReview or an MCPIdentityProvider
// vouched for it.
func TestOneIdentityHasOneKeyHoweverItAuthenticated(t *testing.T) {
	op := newSmallOP(t)
	ps := providersFor(t, op)
	token := op.sign(op.Published, "k1")
	caller, err := ps.Authenticate(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	viaProvider, err := NewAuthenticator(&fakeReviews{valid: map[string]string{}}, nil, AuthenticatorOptions{IdentityProviders: ps}).Authenticate(context.Background(), token)
	if err != nil {
		t.Fatal(err)
	}
	// The same user as the API server would name it (an OIDC authenticator of its own),
	// groups in another order and repeated.
	reviews := &userReviews{user: authenticationv1.UserInfo{Username: "oidc:alice@example.com", Groups: []string{"oidc:mcp-users", "oidc:mcp-users"}}}
	viaReview, err := NewAuthenticator(reviews, nil, AuthenticatorOptions{}).Authenticate(context.Background(), "opaque-cluster-token")
	if err != nil {
		t.Fatal(err)
	}
	if caller.Key != viaProvider.Key || viaProvider.Key != viaReview.Key {
		t.Errorf("one identity, three keys: Caller %s, provider through the Authenticator %s, TokenReview %s", caller.Key, viaProvider.Key, viaReview.Key)
	}
	other := &userReviews{user: authenticationv1.UserInfo{Username: "oidc:alice@example.com", Groups: []string{"oidc:mcp-users", "oidc:admins"}}}
	if id, err := NewAuthenticator(other, nil, AuthenticatorOptions{}).Authenticate(context.Background(), "opaque-cluster-token"); err != nil || id.Key == caller.Key {
		t.Errorf("another group, the same key (%v)", err)
	}
}

// No bytes in a name make two identities one.
func TestIdentityKeyIsUnambiguous(t *testing.T) {
	for _, pair := range [][2]authenticationv1.UserInfo{
		{{Username: "alice", Groups: []string{"a\x00g:b"}}, {Username: "alice", Groups: []string{"a", "b"}}},
		{{Username: "alice\x00"}, {Username: "alice", UID: "\x00"}},
		{{Username: "alice", Groups: []string{"uid"}}, {Username: "alice", UID: "uid"}},
	} {
		if NewCaller(pair[0]).Key == NewCaller(pair[1]).Key {
			t.Errorf("%+v and %+v have one identity key", pair[0], pair[1])
		}
	}
	for _, pair := range [][2]map[string][]string{
		{{"a": {"b\x00e:c"}}, {"a": {"b"}, "c": {}}},
		{{"a": {"b", "c"}}, {"a": {"bc"}}},
		{{"a": {}, "b": {"c"}}, {"a": {"b", "c"}}},
	} {
		if extraKey(pair[0]) == extraKey(pair[1]) {
			t.Errorf("extra %q and %q have one key", pair[0], pair[1])
		}
	}
}
