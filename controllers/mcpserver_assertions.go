package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// The manager requests ServiceAccount tokens for spec.http.auth.oauth2.workloadIdentity.
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create

// defaultTokenExpirationSeconds is the lifetime asked for a ServiceAccount token when
// the spec names none: the API server's minimum.
const defaultTokenExpirationSeconds = 600

// assertionSources supplies the workload JWTs of workloadIdentity: ServiceAccount tokens
// it requests through the TokenRequest API and keeps in memory until four fifths of
// their life have passed, and JWTs it reads from Secrets when they are due. One serves
// every server of a reconciler; the sources it hands the connector are values that
// compare equal for the same spec, so a reconcile that changes nothing keeps the
// session. Tokens are never logged, nor put in errors.
type assertionSources struct {
	// client creates TokenRequests (serviceaccounts/token).
	client client.Client
	// reader reads Secrets from the API server.
	reader client.Reader
	// now is the clock; nil means time.Now.
	now func() time.Time

	mu     sync.Mutex
	tokens map[serviceAccountToken]*cachedToken
}

// cachedToken is the last ServiceAccount token requested for one source. Its mutex
// makes concurrent callers of one source wait for one TokenRequest.
type cachedToken struct {
	mu        sync.Mutex
	audience  string
	token     string
	renewAt   time.Time
	expiresAt time.Time
}

// sources returns the reconciler's assertion sources, made on first use.
func (r *MCPServerReconciler) sources() *assertionSources {
	r.sourcesOnce.Do(func() {
		r.assertions = &assertionSources{client: r.Client, reader: r.SecretReader, tokens: map[serviceAccountToken]*cachedToken{}}
	})
	return r.assertions
}

// workloadIdentity returns spec.http.auth.oauth2.workloadIdentity, or nil.
func workloadIdentity(spec *mcpv1alpha1.HTTPServerSpec) *mcpv1alpha1.OAuth2WorkloadIdentity {
	if spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil
	}
	return spec.Auth.OAuth2.WorkloadIdentity
}

// resolveWorkloadIdentity returns the connector's workload identity config of an http
// server, or nil when it sets none. A tokenFrom Secret must exist now (a missing one is
// a *missingSecretError); its JWT is read again whenever a token is due, so a rotated
// Secret needs no new session.
func (r *secretResolver) resolveWorkloadIdentity(ctx context.Context, spec *mcpv1alpha1.HTTPServerSpec, sources *assertionSources, namespace string) (*connector.OAuth2WorkloadIdentity, error) {
	wi := workloadIdentity(spec)
	if wi == nil {
		return nil, nil
	}
	out := &connector.OAuth2WorkloadIdentity{
		ClientID:          wi.ClientID,
		Scopes:            wi.Scopes,
		TokenURL:          wi.TokenURL,
		Issuer:            wi.Issuer,
		AllowInsecureHTTP: spec.AllowInsecureHTTP,
	}
	switch {
	case wi.ServiceAccountToken != nil:
		sat := wi.ServiceAccountToken
		expiration := sat.ExpirationSeconds
		if expiration == 0 {
			expiration = defaultTokenExpirationSeconds
		}
		out.Assertion = serviceAccountToken{
			sources: sources, namespace: namespace, name: sat.ServiceAccountName,
			audience: sat.Audience, expirationSeconds: expiration,
		}
	case wi.TokenFrom != nil:
		if _, err := r.value(ctx, wi.TokenFrom.SecretKeyRef); err != nil {
			return nil, err
		}
		out.Assertion = secretJWT{sources: sources, namespace: namespace, name: wi.TokenFrom.SecretKeyRef.Name, key: wi.TokenFrom.SecretKeyRef.Key}
	}
	return out, nil
}

// serviceAccountToken is a connector.AssertionSource: a token of a ServiceAccount,
// requested through the TokenRequest API for the audience (the spec's, else the one the
// connector asks for), renewed once four fifths of its life have passed.
type serviceAccountToken struct {
	sources           *assertionSources
	namespace, name   string
	audience          string // empty: the one the connector asks for
	expirationSeconds int64
}

// Assertion implements connector.AssertionSource.
func (s serviceAccountToken) Assertion(ctx context.Context, audience string) (string, error) {
	if s.audience != "" {
		audience = s.audience
	}
	entry := s.sources.entry(s)
	entry.mu.Lock()
	defer entry.mu.Unlock()
	now := s.sources.clock()
	if entry.token != "" && entry.audience == audience && now.Before(entry.renewAt) {
		return entry.token, nil
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences:         []string{audience},
		ExpirationSeconds: &s.expirationSeconds,
	}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name}}
	if err := s.sources.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", s.requestError(err)
	}
	if tr.Status.Token == "" {
		return "", s.fail(false, "the API server issued no token for ServiceAccount %q", s.name)
	}
	expiresAt := tr.Status.ExpirationTimestamp.Time
	if !expiresAt.After(now) {
		expiresAt = now.Add(time.Duration(s.expirationSeconds) * time.Second)
	}
	entry.audience, entry.token, entry.expiresAt = audience, tr.Status.Token, expiresAt
	entry.renewAt = now.Add(expiresAt.Sub(now) * 4 / 5)
	return entry.token, nil
}

// requestError says why a TokenRequest failed, without the token (there is none) and in
// words that say what to do.
func (s serviceAccountToken) requestError(err error) *connector.Error {
	switch {
	case apierrors.IsNotFound(err):
		return s.fail(false, "ServiceAccount %q not found in namespace %q: create it, or name another in spec.http.auth.oauth2.workloadIdentity.serviceAccountToken",
			s.name, s.namespace)
	case apierrors.IsForbidden(err):
		return s.fail(false, "the API server refused a token of ServiceAccount %q: the manager may not create serviceaccounts/token in namespace %q",
			s.name, s.namespace)
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return s.fail(false, "the API server refused a token of ServiceAccount %q: %s", s.name, connector.TruncateUTF8(err.Error(), 256))
	default:
		return s.fail(true, "requesting a token of ServiceAccount %q failed: %s", s.name, connector.TruncateUTF8(err.Error(), 256))
	}
}

func (s serviceAccountToken) fail(transient bool, format string, args ...any) *connector.Error {
	return &connector.Error{
		Reason:         mcpv1alpha1.ReasonWorkloadTokenUnavailable,
		Authentication: mcpv1alpha1.ReasonWorkloadTokenUnavailable,
		Message:        fmt.Sprintf(format, args...),
		Transient:      transient,
	}
}

func (a *assertionSources) clock() time.Time {
	if a.now != nil {
		return a.now()
	}
	return time.Now()
}

// entry returns the cache entry of a source, dropping the entries of tokens that have
// expired (servers deleted, or changed to another source), so the cache holds at most
// one token per source in use.
func (a *assertionSources) entry(s serviceAccountToken) *cachedToken {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e, ok := a.tokens[s]; ok {
		return e
	}
	now := a.clock()
	for k, e := range a.tokens {
		if e.mu.TryLock() {
			if e.token != "" && now.After(e.expiresAt) {
				delete(a.tokens, k)
			}
			e.mu.Unlock()
		}
	}
	e := &cachedToken{}
	a.tokens[s] = e
	return e
}

// secretJWT is a connector.AssertionSource: a workload JWT another system issues and
// keeps current in a Secret key, read when a token is due.
type secretJWT struct {
	sources              *assertionSources
	namespace, name, key string
}

// Assertion implements connector.AssertionSource; the audience is the JWT's own.
func (s secretJWT) Assertion(ctx context.Context, _ string) (string, error) {
	secret := &corev1.Secret{}
	err := s.sources.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, secret)
	fail := func(transient bool, format string, args ...any) (string, error) {
		return "", &connector.Error{
			Reason:         mcpv1alpha1.ReasonWorkloadTokenUnavailable,
			Authentication: mcpv1alpha1.ReasonWorkloadTokenUnavailable,
			Message:        fmt.Sprintf(format, args...),
			Transient:      transient,
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		return fail(false, "secret %q not found", s.name)
	case err != nil:
		return fail(true, "reading secret %q failed: %s", s.name, connector.TruncateUTF8(err.Error(), 256))
	}
	// Secrets made from files often end in a newline, which is no part of a JWT.
	jwt := strings.TrimSpace(string(secret.Data[s.key]))
	if jwt == "" {
		return fail(false, "secret %q has no workload JWT in key %q", s.name, s.key)
	}
	return jwt, nil
}
