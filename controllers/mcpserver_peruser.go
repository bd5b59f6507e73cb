package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// perUserSpec returns the perUser mode of an http server's spec, or nil when it sets
// none.
func perUserSpec(spec *mcpv1alpha1.HTTPServerSpec) *mcpv1alpha1.OAuth2PerUser {
	if spec == nil || spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil
	}
	return spec.Auth.OAuth2.PerUser
}

// perUserSecretRefs returns the Secrets (in the server's namespace) the perUser mode of
// spec references: its client secret, when it has one.
func perUserSecretRefs(spec *mcpv1alpha1.HTTPServerSpec) []*mcpv1alpha1.SecretKeySource {
	if pu := perUserSpec(spec); pu != nil && pu.ClientSecret != nil {
		return []*mcpv1alpha1.SecretKeySource{pu.ClientSecret}
	}
	return nil
}

// identityProviderOf returns the name of the MCPIdentityProvider obj depends on, the one
// its per-caller mode or its perUser mode names, or "" when it names none. It keys
// identityProviderIndex.
func identityProviderOf(obj *mcpv1alpha1.MCPServer) string {
	if name := perCallerProvider(obj); name != "" {
		return name
	}
	if pu := perUserSpec(obj.Spec.HTTP); pu != nil {
		return pu.IdentityProvider
	}
	return ""
}

// allowsPerUserNamespace reports whether a provider's perUser lets perUser MCPServers of
// namespace name it.
func allowsPerUserNamespace(pu *mcpv1alpha1.IdentityPerUser, namespace string) bool {
	return slices.Contains(pu.Namespaces, allNamespaces) || slices.Contains(pu.Namespaces, namespace)
}

// resolvePerUser returns the connector's per-person config of an http server, or nil
// when the server sets no perUser mode. Where a person may authorize, and where their
// token may be sent, come from the MCPIdentityProvider the server names, never from the
// server: the provider must exist, have a spec.perUser that lists the server's
// namespace, its URL among the resources, a pinned issuer among the authorization
// servers and every scope the server asks for, or obs.identityProvider says why not and
// nil is returned. The client secret is read from the server's namespace; a missing one
// is a *missingSecretError.
func (r *MCPServerReconciler) resolvePerUser(ctx context.Context, obj *mcpv1alpha1.MCPServer, resolver *secretResolver, obs *observation) (*connector.PerUser, error) {
	spec := obj.Spec.HTTP
	pu := perUserSpec(spec)
	if pu == nil {
		return nil, nil
	}
	name := pu.IdentityProvider
	refuse := func(reason, format string, args ...any) (*connector.PerUser, error) {
		obs.identityProvider = &blocker{reason, fmt.Sprintf(format, args...)}
		return nil, nil
	}
	provider := &mcpv1alpha1.MCPIdentityProvider{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, provider); err != nil {
		if apierrors.IsNotFound(err) {
			return refuse(mcpv1alpha1.ReasonIdentityProviderNotFound,
				"MCPIdentityProvider %q, named by perUser.identityProvider, does not exist: a cluster admin must create it with a spec.perUser that lists namespace %s, "+
					"the server's authorization server in authorizationServers and its URL %s in resources",
				name, obj.Namespace, connector.DisplayURL(spec.URL))
		}
		return nil, fmt.Errorf("reading MCPIdentityProvider %q: %w", name, err)
	}
	allowed := provider.Spec.PerUser
	switch {
	case allowed == nil:
		return refuse(mcpv1alpha1.ReasonPerUserNotConfigured,
			"MCPIdentityProvider %q has no spec.perUser: no cluster admin said where its persons may authorize, so nobody is sent anywhere", name)
	case !allowsPerUserNamespace(allowed, obj.Namespace):
		return refuse(mcpv1alpha1.ReasonNamespaceNotAllowed,
			"MCPIdentityProvider %q does not list namespace %s in spec.perUser.namespaces: its persons do not authorize this namespace's servers",
			name, obj.Namespace)
	}
	cfg := &connector.PerUser{
		Provider:             name,
		Issuer:               pu.Issuer,
		ClientID:             pu.ClientID,
		Scopes:               slices.Clone(pu.Scopes),
		AuthorizationServers: slices.Clone(allowed.AuthorizationServers),
		Resources:            slices.Clone(allowed.Resources),
		AllowedScopes:        slices.Clone(allowed.Scopes),
		AllowInsecureHTTP:    spec.AllowInsecureHTTP,

		DynamicClientRegistration: allowed.DynamicClientRegistration,
	}
	if e := cfg.Allowed(spec.URL); e != nil {
		return refuse(e.Reason, "%s", e.Message)
	}
	if ref := pu.ClientSecret; ref != nil {
		data, err := resolver.value(ctx, ref.SecretKeyRef)
		if err != nil {
			return nil, err
		}
		// Secrets made from files often end in a newline, which is no part of a secret.
		cfg.ClientSecret = strings.TrimSpace(string(data))
	}
	return cfg, nil
}
