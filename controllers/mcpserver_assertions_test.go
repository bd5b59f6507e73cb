package controllers

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// tokenAPI is a TokenRequest API that records what it was asked and issues tokens that
// live exactly as long as asked, or fails with err.
type tokenAPI struct {
	mu       sync.Mutex
	now      time.Time
	requests []authenticationv1.TokenRequestSpec
	err      error
}

func (api *tokenAPI) sources(t *testing.T) *assertionSources {
	t.Helper()
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		SubResourceCreate: func(_ context.Context, _ client.Client, sub string, obj client.Object, subResource client.Object, _ ...client.SubResourceCreateOption) error {
			api.mu.Lock()
			defer api.mu.Unlock()
			if sub != "token" || obj.GetNamespace() != "team-a" {
				t.Errorf("created %s of %s/%s", sub, obj.GetNamespace(), obj.GetName())
			}
			if api.err != nil {
				return api.err
			}
			tr := subResource.(*authenticationv1.TokenRequest)
			api.requests = append(api.requests, *tr.Spec.DeepCopy())
			tr.Status.Token = "sa-token-" + obj.GetName() + "-" + strings.Repeat("x", len(api.requests))
			tr.Status.ExpirationTimestamp = metav1.NewTime(api.now.Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
			return nil
		},
	}).Build()
	return &assertionSources{client: c, tokens: map[serviceAccountToken]*cachedToken{}, now: func() time.Time {
		api.mu.Lock()
		defer api.mu.Unlock()
		return api.now
	}}
}

func (api *tokenAPI) advance(d time.Duration) {
	api.mu.Lock()
	defer api.mu.Unlock()
	api.now = api.now.Add(d)
}

func (api *tokenAPI) count() int {
	api.mu.Lock()
	defer api.mu.Unlock()
	return len(api.requests)
}

func TestServiceAccountTokenIsCachedAndRenewedAtFourFifthsOfItsLife(t *testing.T) {
	ctx := context.Background()
	api := &tokenAPI{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}
	sources := api.sources(t)
	src := serviceAccountToken{sources: sources, namespace: "team-a", name: "mcp-github", expirationSeconds: 600}
	const issuer = "https://as.example.com"

	first, err := src.Assertion(ctx, issuer)
	if err != nil {
		t.Fatal(err)
	}
	if got := api.requests[0]; len(got.Audiences) != 1 || got.Audiences[0] != issuer || *got.ExpirationSeconds != 600 {
		t.Errorf("TokenRequest = %+v, want audience %s for 600 seconds", got, issuer)
	}
	api.advance(479 * time.Second)
	if again, _ := src.Assertion(ctx, issuer); again != first || api.count() != 1 {
		t.Errorf("before four fifths of its life the token was requested again (%d requests)", api.count())
	}
	api.advance(2 * time.Second)
	renewed, err := src.Assertion(ctx, issuer)
	if err != nil || renewed == first || api.count() != 2 {
		t.Errorf("after four fifths of its life: %d requests, renewed=%v, err=%v; want a new token", api.count(), renewed != first, err)
	}
	// Another audience asked for (the authorization server changed) is another token.
	if _, err := src.Assertion(ctx, "https://other-as.example.com"); err != nil || api.count() != 3 {
		t.Errorf("another audience: %d requests, err=%v; want a new token", api.count(), err)
	}
	// A configured audience wins over the one asked for.
	pinned := serviceAccountToken{sources: sources, namespace: "team-a", name: "mcp-github", audience: "api://mcp", expirationSeconds: 3600}
	if _, err := pinned.Assertion(ctx, issuer); err != nil || api.requests[3].Audiences[0] != "api://mcp" || *api.requests[3].ExpirationSeconds != 3600 {
		t.Errorf("configured audience: %+v, err=%v", api.requests[3], err)
	}
	// Two equal sources (the same spec, reconciled twice) share the token: the session
	// is kept, and so is the token.
	twin := serviceAccountToken{sources: sources, namespace: "team-a", name: "mcp-github", expirationSeconds: 600}
	if connector.AssertionSource(twin) != connector.AssertionSource(src) {
		t.Error("the same spec gives sources that are not equal")
	}
	if _, _ = twin.Assertion(ctx, "https://other-as.example.com"); api.count() != 4 {
		t.Errorf("an equal source requested a token of its own (%d requests)", api.count())
	}
}

func TestServiceAccountTokenRefusals(t *testing.T) {
	gr := schema.GroupResource{Resource: "serviceaccounts"}
	for _, tc := range []struct {
		name      string
		err       error
		message   string
		transient bool
	}{
		{"missing ServiceAccount", apierrors.NewNotFound(gr, "mcp-github"), `ServiceAccount "mcp-github" not found in namespace "team-a"`, false},
		{"no right to create tokens", apierrors.NewForbidden(gr, "mcp-github", errors.New("RBAC")), `the manager may not create serviceaccounts/token in namespace "team-a"`, false},
		{"API server unavailable", apierrors.NewServiceUnavailable("later"), `requesting a token of ServiceAccount "mcp-github" failed`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &tokenAPI{now: time.Now(), err: tc.err}
			src := serviceAccountToken{sources: api.sources(t), namespace: "team-a", name: "mcp-github", expirationSeconds: 600}
			_, err := src.Assertion(context.Background(), "https://as.example.com")
			var e *connector.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v is not a *connector.Error", err)
			}
			if e.Authentication != mcpv1alpha1.ReasonWorkloadTokenUnavailable || !strings.Contains(e.Message, tc.message) || e.Transient != tc.transient {
				t.Errorf("error = %+v, want WorkloadTokenUnavailable saying %q, transient=%v", e, tc.message, tc.transient)
			}
		})
	}
}

func TestSecretJWTIsReadWhenDue(t *testing.T) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "wif"}, Data: map[string][]byte{"jwt": []byte("first.jwt.value\n")}}
	c := fake.NewClientBuilder().WithObjects(secret).Build()
	src := secretJWT{sources: &assertionSources{reader: c}, namespace: "team-a", name: "wif", key: "jwt"}
	if got, err := src.Assertion(ctx, "ignored"); err != nil || got != "first.jwt.value" {
		t.Fatalf("Assertion = %q, %v", got, err)
	}
	secret.Data["jwt"] = []byte("rotated.jwt.value")
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if got, _ := src.Assertion(ctx, "ignored"); got != "rotated.jwt.value" {
		t.Errorf("after rotation Assertion = %q", got)
	}
	secret.Data["jwt"] = nil
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Assertion(ctx, "ignored"); err == nil || !strings.Contains(err.Error(), `secret "wif" has no workload JWT in key "jwt"`) {
		t.Errorf("empty key: %v", err)
	}
}
