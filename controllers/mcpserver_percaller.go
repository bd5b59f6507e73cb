package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// identityProviderIndex indexes MCPServers by the MCPIdentityProvider their per-caller
// or perUser mode names (identityProviderOf), so a provider created, changed or deleted
// wakes exactly the servers that use it.
const identityProviderIndex = ".spec.http.auth.oauth2.identityProvider"

// allNamespaces in an MCPIdentityProvider's tokenExchange.namespaces lets every
// namespace's MCPServers use the provider.
const allNamespaces = "*"

// perCallerSecretRefs returns the Secrets (in the server's namespace) a per-caller mode
// (enterpriseManaged or tokenExchange) of spec references. The identity provider's own
// client secret lives in the cluster resource namespace and is not among them.
func perCallerSecretRefs(spec *mcpv1alpha1.HTTPServerSpec) []*mcpv1alpha1.SecretKeySource {
	if spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil
	}
	if em := spec.Auth.OAuth2.EnterpriseManaged; em != nil && em.ClientSecret != nil {
		return []*mcpv1alpha1.SecretKeySource{em.ClientSecret}
	}
	return nil
}

// perCallerProvider returns the name of the MCPIdentityProvider the per-caller mode of
// obj names, or "" when it sets none.
func perCallerProvider(obj *mcpv1alpha1.MCPServer) string {
	h := obj.Spec.HTTP
	if h == nil || h.Auth == nil || h.Auth.OAuth2 == nil {
		return ""
	}
	switch o := h.Auth.OAuth2; {
	case o.TokenExchange != nil:
		return o.TokenExchange.IdentityProvider
	case o.EnterpriseManaged != nil:
		return o.EnterpriseManaged.IdentityProvider
	}
	return ""
}

// allowsNamespace reports whether a provider's tokenExchange lets MCPServers of
// namespace use it.
func allowsNamespace(tx *mcpv1alpha1.IdentityTokenExchange, namespace string) bool {
	return slices.Contains(tx.Namespaces, allNamespaces) || slices.Contains(tx.Namespaces, namespace)
}

// resolvePerCaller returns the connector's per-caller config of an http server, or nil
// when the server sets no per-caller mode. Where the caller's token is exchanged comes
// from the MCPIdentityProvider the server names, never from the server: the provider
// must exist, have a tokenExchange that lists the server's namespace, the audience and
// scopes it asks for (and, for enterpriseManaged, authorization servers), or
// obs.identityProvider says why not and nil is returned. The provider's client secret is read from the cluster resource
// namespace, the server's own client secret from the server's namespace.
func (r *MCPServerReconciler) resolvePerCaller(ctx context.Context, obj *mcpv1alpha1.MCPServer, resolver *secretResolver, obs *observation) (*connector.PerCallerAuth, error) {
	spec := obj.Spec.HTTP
	name := perCallerProvider(obj)
	if name == "" {
		return nil, nil
	}
	o := spec.Auth.OAuth2
	mode := perCallerMode(obj)
	refuse := func(reason, format string, args ...any) (*connector.PerCallerAuth, error) {
		obs.identityProvider = &blocker{reason, fmt.Sprintf(format, args...)}
		return nil, nil
	}
	provider := &mcpv1alpha1.MCPIdentityProvider{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, provider); err != nil {
		if apierrors.IsNotFound(err) {
			return refuse(mcpv1alpha1.ReasonIdentityProviderNotFound,
				"MCPIdentityProvider %q, named by %s.identityProvider, does not exist: a cluster admin must create it with a spec.tokenExchange that lists namespace %s",
				name, mode, obj.Namespace)
		}
		return nil, fmt.Errorf("reading MCPIdentityProvider %q: %w", name, err)
	}
	tx := provider.Spec.TokenExchange
	switch {
	case tx == nil:
		return refuse(mcpv1alpha1.ReasonTokenExchangeNotConfigured,
			"MCPIdentityProvider %q has no spec.tokenExchange: no cluster admin said where its callers' tokens may be exchanged", name)
	case !allowsNamespace(tx, obj.Namespace):
		return refuse(mcpv1alpha1.ReasonNamespaceNotAllowed,
			"MCPIdentityProvider %q does not list namespace %s in spec.tokenExchange.namespaces: its callers' tokens are not exchanged for this namespace's servers",
			name, obj.Namespace)
	case o.EnterpriseManaged != nil && len(tx.AuthorizationServers) == 0:
		return refuse(mcpv1alpha1.ReasonTokenExchangeNotConfigured,
			"MCPIdentityProvider %q lists no spec.tokenExchange.authorizationServers: no identity assertion grant may be requested with it, so no enterpriseManaged server may use it", name)
	}
	cfg := perCallerConfig(name, tx, o, spec.AllowInsecureHTTP)
	if e := cfg.Allowed(); e != nil {
		return refuse(e.Reason, "%s", e.Message)
	}
	var providerSecret string
	if ref := tx.ClientSecret; ref != nil {
		if r.ClusterResourceNamespace == "" {
			obs.missingSecret = fmt.Errorf("secret %q of MCPIdentityProvider %q cannot be read: the manager has no cluster resource namespace; set --cluster-resource-namespace or $POD_NAMESPACE", ref.SecretKeyRef.Name, name)
			return nil, nil
		}
		cluster := &secretResolver{reader: r.SecretReader, namespace: r.ClusterResourceNamespace}
		data, err := cluster.value(ctx, mcpv1alpha1.SecretKeyReference(ref.SecretKeyRef))
		var missing *missingSecretError
		if errors.As(err, &missing) {
			obs.missingSecret = fmt.Errorf("%w in namespace %s (MCPIdentityProvider %q's tokenExchange.clientSecret)", missing, r.ClusterResourceNamespace, name)
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		// Secrets made from files often end in a newline, which is no part of a secret.
		providerSecret = strings.TrimSpace(string(data))
	}

	if te := cfg.TokenExchange; te != nil {
		te.ClientSecret = providerSecret
		return cfg, nil
	}
	em := cfg.EnterpriseManaged
	em.IdentityProvider.ClientSecret = providerSecret
	if ref := o.EnterpriseManaged.ClientSecret; ref != nil {
		data, err := resolver.value(ctx, ref.SecretKeyRef)
		if err != nil {
			return nil, err
		}
		em.ClientSecret = strings.TrimSpace(string(data))
	}
	return cfg, nil
}

// perCallerConfig is the connector's per-caller config of the mode o, exchanging at the
// tokenExchange tx of the MCPIdentityProvider name, without its client secrets.
func perCallerConfig(name string, tx *mcpv1alpha1.IdentityTokenExchange, o *mcpv1alpha1.OAuth2Auth, allowInsecureHTTP bool) *connector.PerCallerAuth {
	if te := o.TokenExchange; te != nil {
		return &connector.PerCallerAuth{TokenExchange: &connector.TokenExchange{
			Provider:           name,
			TokenURL:           tx.TokenURL,
			ClientID:           tx.ClientID,
			Audience:           te.Audience,
			Scopes:             te.Scopes,
			AllowedAudiences:   slices.Clone(tx.Audiences),
			AllowedScopes:      slices.Clone(tx.Scopes),
			RequestedTokenType: te.RequestedTokenType,
			AllowInsecureHTTP:  allowInsecureHTTP,
		}}
	}
	em := o.EnterpriseManaged
	return &connector.PerCallerAuth{EnterpriseManaged: &connector.EnterpriseManaged{
		IdentityProvider: connector.IdentityProvider{
			Name:                 name,
			TokenURL:             tx.TokenURL,
			ClientID:             tx.ClientID,
			AuthorizationServers: slices.Clone(tx.AuthorizationServers),
			Scopes:               slices.Clone(tx.Scopes),
		},
		ClientID:          em.ClientID,
		Scopes:            em.Scopes,
		AllowInsecureHTTP: allowInsecureHTTP,
	}}
}

// perCallerMode names the mode of obj whose credentials follow the caller, for
// messages.
func perCallerMode(obj *mcpv1alpha1.MCPServer) string {
	var o *mcpv1alpha1.OAuth2Auth
	if h := obj.Spec.HTTP; h != nil && h.Auth != nil {
		o = h.Auth.OAuth2
	}
	switch {
	case o != nil && o.EnterpriseManaged != nil:
		return "enterpriseManaged"
	case o != nil && o.PerUser != nil:
		return "perUser"
	}
	return "tokenExchange"
}
