package controllers

import (
	"context"
	"strings"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// perCallerSecretRefs returns the Secrets a per-caller mode (enterpriseManaged or
// tokenExchange) of spec references.
func perCallerSecretRefs(spec *mcpv1alpha1.HTTPServerSpec) []*mcpv1alpha1.SecretKeySource {
	if spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil
	}
	var refs []*mcpv1alpha1.SecretKeySource
	if em := spec.Auth.OAuth2.EnterpriseManaged; em != nil {
		refs = append(refs, em.ClientSecret, em.IdentityProvider.ClientSecret)
	}
	if te := spec.Auth.OAuth2.TokenExchange; te != nil {
		refs = append(refs, te.ClientSecret)
	}
	out := refs[:0]
	for _, ref := range refs {
		if ref != nil {
			out = append(out, ref)
		}
	}
	return out
}

// resolvePerCaller returns the connector's per-caller config of an http server with its
// client secrets read from their Secrets, or nil when the server sets no per-caller mode.
func (r *secretResolver) resolvePerCaller(ctx context.Context, spec *mcpv1alpha1.HTTPServerSpec) (*connector.PerCallerAuth, error) {
	if spec.Auth == nil || spec.Auth.OAuth2 == nil {
		return nil, nil
	}
	secret := func(ref *mcpv1alpha1.SecretKeySource) (string, error) {
		if ref == nil {
			return "", nil
		}
		data, err := r.value(ctx, ref.SecretKeyRef)
		// Secrets made from files often end in a newline, which is no part of a secret.
		return strings.TrimSpace(string(data)), err
	}
	o := spec.Auth.OAuth2
	switch {
	case o.TokenExchange != nil:
		te := o.TokenExchange
		clientSecret, err := secret(te.ClientSecret)
		if err != nil {
			return nil, err
		}
		return &connector.PerCallerAuth{TokenExchange: &connector.TokenExchange{
			TokenURL:           te.TokenURL,
			ClientID:           te.ClientID,
			ClientSecret:       clientSecret,
			Audience:           te.Audience,
			Resource:           te.Resource,
			Scopes:             te.Scopes,
			RequestedTokenType: te.RequestedTokenType,
			AllowInsecureHTTP:  spec.AllowInsecureHTTP,
		}}, nil
	case o.EnterpriseManaged != nil:
		em := o.EnterpriseManaged
		clientSecret, err := secret(em.ClientSecret)
		if err != nil {
			return nil, err
		}
		idpSecret, err := secret(em.IdentityProvider.ClientSecret)
		if err != nil {
			return nil, err
		}
		return &connector.PerCallerAuth{EnterpriseManaged: &connector.EnterpriseManaged{
			IdentityProvider: connector.IdentityProvider{
				TokenURL:     em.IdentityProvider.TokenURL,
				ClientID:     em.IdentityProvider.ClientID,
				ClientSecret: idpSecret,
			},
			ClientID:          em.ClientID,
			ClientSecret:      clientSecret,
			Scopes:            em.Scopes,
			AllowInsecureHTTP: spec.AllowInsecureHTTP,
		}}, nil
	}
	return nil, nil
}

// perCallerMode names the per-caller mode of obj, for messages.
func perCallerMode(obj *mcpv1alpha1.MCPServer) string {
	if h := obj.Spec.HTTP; h != nil && h.Auth != nil && h.Auth.OAuth2 != nil && h.Auth.OAuth2.EnterpriseManaged != nil {
		return "enterpriseManaged"
	}
	return "tokenExchange"
}
