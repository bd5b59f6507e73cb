package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// secretRefsIndex indexes MCPServers by the names of the Secrets they reference, so a
// changed Secret wakes exactly the servers that use it.
const secretRefsIndex = ".spec.secretRefs" //nolint:gosec // an index name, not a credential

// referencedSecrets returns the names of the Secrets a server's spec references, sorted
// and without repeats.
func referencedSecrets(obj *mcpv1alpha1.MCPServer) []string {
	seen := map[string]bool{}
	if h := obj.Spec.HTTP; h != nil {
		for _, header := range h.Headers {
			if header.ValueFrom != nil {
				seen[header.ValueFrom.SecretKeyRef.Name] = true
			}
		}
		if h.TLS != nil && h.TLS.CABundle != nil {
			seen[h.TLS.CABundle.SecretKeyRef.Name] = true
		}
		if cc := clientCredentials(h); cc != nil {
			if cc.ClientSecret != nil {
				seen[cc.ClientSecret.SecretKeyRef.Name] = true
			}
			if cc.PrivateKey != nil {
				seen[cc.PrivateKey.SecretKeyRef.Name] = true
			}
		}
		if wi := workloadIdentity(h); wi != nil && wi.TokenFrom != nil {
			seen[wi.TokenFrom.SecretKeyRef.Name] = true
		}
		for _, ref := range perCallerSecretRefs(h) {
			seen[ref.SecretKeyRef.Name] = true
		}
		for _, ref := range perUserSecretRefs(h) {
			seen[ref.SecretKeyRef.Name] = true
		}
	}
	if stdio := obj.Spec.Stdio; stdio != nil {
		// The local runtime resolves these itself; the pod runtime leaves them to the
		// kubelet, and a rotation is a reconcile that changes nothing.
		for _, e := range stdio.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				seen[e.ValueFrom.SecretKeyRef.Name] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// missingSecretError says which Secret or key a server lacks. It names them and never
// carries a value.
type missingSecretError struct {
	secret, key string
	keyOnly     bool
}

func (e *missingSecretError) Error() string {
	if e.keyOnly {
		return fmt.Sprintf("secret %q has no key %q", e.secret, e.key)
	}
	return fmt.Sprintf("secret %q not found", e.secret)
}

// secretResolver reads Secret values straight from the API server. The manager caches
// only Secret metadata (to be woken when one changes), so it never holds the data of
// every Secret in the cluster.
type secretResolver struct {
	reader    client.Reader
	namespace string
	secrets   map[string]*corev1.Secret
}

// value returns the value of one Secret key, reading each Secret once per reconcile.
func (r *secretResolver) value(ctx context.Context, ref mcpv1alpha1.SecretKeyReference) ([]byte, error) {
	secret, ok := r.secrets[ref.Name]
	if !ok {
		secret = &corev1.Secret{}
		err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: ref.Name}, secret)
		switch {
		case apierrors.IsNotFound(err):
			secret = nil
		case err != nil:
			return nil, fmt.Errorf("reading secret %q: %w", ref.Name, err)
		}
		if r.secrets == nil {
			r.secrets = map[string]*corev1.Secret{}
		}
		r.secrets[ref.Name] = secret
	}
	if secret == nil {
		return nil, &missingSecretError{secret: ref.Name, key: ref.Key}
	}
	value, ok := secret.Data[ref.Key]
	if !ok {
		return nil, &missingSecretError{secret: ref.Name, key: ref.Key, keyOnly: true}
	}
	return value, nil
}

// resolveHTTP returns the headers and CA bundle of an http server with every Secret
// reference resolved.
func (r *secretResolver) resolveHTTP(ctx context.Context, spec *mcpv1alpha1.HTTPServerSpec) ([]connector.Header, []byte, error) {
	headers := make([]connector.Header, 0, len(spec.Headers))
	for _, h := range spec.Headers {
		value := h.Value
		if h.ValueFrom != nil {
			data, err := r.value(ctx, h.ValueFrom.SecretKeyRef)
			if err != nil {
				return nil, nil, err
			}
			// Leading and trailing whitespace is not part of an HTTP field value (RFC
			// 9110), and Secrets made from files often end in a newline.
			value = strings.TrimSpace(string(data))
		}
		headers = append(headers, connector.Header{Name: h.Name, Value: value})
	}
	var caBundle []byte
	if spec.TLS != nil && spec.TLS.CABundle != nil {
		data, err := r.value(ctx, spec.TLS.CABundle.SecretKeyRef)
		if err != nil {
			return nil, nil, err
		}
		caBundle = data
	}
	return headers, caBundle, nil
}

// clientCredentials returns spec.http.auth.oauth2.clientCredentials, or nil.
func clientCredentials(spec *mcpv1alpha1.HTTPServerSpec) *mcpv1alpha1.OAuth2ClientCredentials {
	if spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil
	}
	return spec.Auth.OAuth2.ClientCredentials
}

// resolveOAuth2 returns the connector's OAuth config of an http server with its client
// secret or private key read from the Secret, or nil when the server sets no auth.
func (r *secretResolver) resolveOAuth2(ctx context.Context, spec *mcpv1alpha1.HTTPServerSpec) (*connector.OAuth2ClientCredentials, error) {
	cc := clientCredentials(spec)
	if cc == nil {
		return nil, nil
	}
	out := &connector.OAuth2ClientCredentials{
		ClientID:          cc.ClientID,
		AuthMethod:        cc.TokenEndpointAuthMethod,
		Scopes:            cc.Scopes,
		TokenURL:          cc.TokenURL,
		Issuer:            cc.Issuer,
		AllowInsecureHTTP: spec.AllowInsecureHTTP,
	}
	if cc.ClientSecret != nil {
		data, err := r.value(ctx, cc.ClientSecret.SecretKeyRef)
		if err != nil {
			return nil, err
		}
		// Secrets made from files often end in a newline, which is no part of a secret.
		out.ClientSecret = strings.TrimSpace(string(data))
	}
	if cc.PrivateKey != nil {
		data, err := r.value(ctx, cc.PrivateKey.SecretKeyRef)
		if err != nil {
			return nil, err
		}
		out.PrivateKey = data
	}
	return out, nil
}
