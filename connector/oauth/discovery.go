package oauth

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// Error is a failure this package judged: of discovery itself (metadata that names
// another resource or issuer than the one asked about, Reason
// mcpv1alpha1.ReasonMetadataMismatch, or no usable metadata,
// mcpv1alpha1.ReasonTokenRequestFailed), of a token request the configuration cannot
// make, or a token endpoint's answer. Its Message names URLs as [DisplayURL] prints
// them and never carries a credential.
type Error struct {
	// Reason is one of the condition reasons of api/v1alpha1.
	Reason string
	// Message says what happened, fit for a condition message.
	Message string
	// Transient is true when the failure may heal by itself: the metadata server or
	// the token endpoint answered 5xx (or 429).
	Transient bool
	// Authentication is the reason of the server's Authenticated condition when it
	// differs from Reason (a token request the configuration cannot make is
	// ReasonInvalidSpec, and ReasonInvalidClient for Authenticated); empty means Reason.
	Authentication string
	// Refused marks a token endpoint's OAuth error answer that sending the same grant
	// again would only repeat (invalid_grant, invalid_scope, unauthorized_client, ...).
	Refused bool
}

// Error returns the message prefixed with the reason.
func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func discoveryError(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Fetch GETs the metadata document of kind what ("protected resource metadata",
// "authorization server metadata") from u and returns the status it was answered with
// and, on 200, decodes the document into v. An error ends discovery and is returned
// as it is.
type Fetch func(what string, u *url.URL, v any) (status int, err error)

// Discovery is what MCP authorization discovery starts from.
type Discovery struct {
	// Endpoint is the MCP server's URL; Resource its canonical form ([CanonicalResource]).
	Endpoint *url.URL
	Resource string
	// Scopes are the scopes tokens will be asked with, if already known (configured, or
	// from the server's challenge); empty takes the protected resource metadata's.
	Scopes []string
	// Issuer, when set, is the one authorization server that may be used: the
	// protected resource metadata must name it.
	Issuer string
	// Grant is the grant type the authorization server must support when its metadata
	// lists grants; empty requires none.
	Grant string
	// AllowInsecureHTTP allows metadata over plain http.
	AllowInsecureHTTP bool
	// Fetch gets each document.
	Fetch Fetch
}

// Metadata is what discovery found out about where and how to get a token.
type Metadata struct {
	// TokenURL is the token endpoint; Issuer the authorization server's issuer.
	TokenURL *url.URL
	Issuer   string
	// Scopes are the Discovery's, else those the protected resource supports (at most
	// 32 well-formed ones).
	Scopes []string
	// AuthMethods are the token endpoint's client authentication methods, if listed.
	AuthMethods []string
	// AuthorizationURL, IssParameter and CodeChallengeMethods are what the metadata
	// says about the authorization code flow.
	AuthorizationURL     string
	IssParameter         bool
	CodeChallengeMethods []string
	// RegistrationURL is the dynamic client registration endpoint (RFC 7591), if any.
	RegistrationURL string
}

// protectedResourceMetadata is the part of RFC 9728 metadata discovery reads.
type protectedResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// authorizationServerMetadata is the part of RFC 8414 (or OpenID) metadata discovery
// reads.
type authorizationServerMetadata struct {
	Issuer                    string   `json:"issuer"`
	TokenEndpoint             string   `json:"token_endpoint"`
	GrantTypesSupported       []string `json:"grant_types_supported"`
	TokenEndpointAuthMethods  []string `json:"token_endpoint_auth_methods_supported"`
	TokenEndpointSigningAlgos []string `json:"token_endpoint_auth_signing_alg_values_supported"`
	AuthorizationEndpoint     string   `json:"authorization_endpoint"`
	IssParameterSupported     bool     `json:"authorization_response_iss_parameter_supported"`
	CodeChallengeMethods      []string `json:"code_challenge_methods_supported"`
	RegistrationEndpoint      string   `json:"registration_endpoint"`
}

// Discover finds the token endpoint by MCP authorization discovery: RFC 9728 protected
// resource metadata (the challenge's resource_metadata, else the well-known locations,
// path-inserted first), then RFC 8414 or OpenID authorization server metadata of the
// authorization server it names (the pinned one, when d.Issuer is set), checking that
// each names the resource and issuer asked about. The token endpoint it returns is
// not yet judged fit for a credential; that is the caller's. Its errors are an *Error,
// or what d.Fetch returned.
func Discover(d Discovery, ch Challenge) (*Metadata, error) {
	meta := &Metadata{Scopes: d.Scopes}
	var candidates []string
	if ch.ResourceMetadata != "" {
		candidates = []string{ch.ResourceMetadata}
	} else {
		base := d.Endpoint.Scheme + "://" + d.Endpoint.Host + "/.well-known/oauth-protected-resource"
		if p := strings.TrimRight(d.Endpoint.EscapedPath(), "/"); p != "" {
			candidates = append(candidates, base+p)
		}
		candidates = append(candidates, base)
	}
	var prm protectedResourceMetadata
	prmURL, err := d.fetchFirst("protected resource metadata", candidates, &prm)
	if err != nil {
		return nil, err
	}
	if got, ok := parseCanonical(prm.Resource); !ok || got != d.Resource {
		return nil, discoveryError(mcpv1alpha1.ReasonMetadataMismatch,
			"protected resource metadata at %s names resource %s, not the server's URL %s; no token was requested",
			DisplayURL(prmURL), QuoteURL(prm.Resource), DisplayURL(d.Endpoint))
	}
	if len(prm.AuthorizationServers) == 0 {
		return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
			"protected resource metadata at %s names no authorization server", DisplayURL(prmURL))
	}
	if len(meta.Scopes) == 0 {
		meta.Scopes = BoundedScopes(prm.ScopesSupported)
	}

	issuer := prm.AuthorizationServers[0]
	if pinned := d.Issuer; pinned != "" {
		// Only the pinned authorization server gets the credential, and only when the
		// server's metadata names it: nothing is fetched from any other.
		i := slices.IndexFunc(prm.AuthorizationServers, func(s string) bool { return SameIssuer(s, pinned) })
		if i < 0 {
			return nil, discoveryError(mcpv1alpha1.ReasonMetadataMismatch,
				"protected resource metadata at %s names authorization server %s, not the pinned issuer %s; no token was requested",
				DisplayURL(prmURL), QuoteURL(prm.AuthorizationServers[0]), QuoteURL(pinned))
		}
		issuer = prm.AuthorizationServers[i]
	}
	iu, perr := url.Parse(issuer)
	if perr != nil || (iu.Scheme != "https" && iu.Scheme != "http") || iu.Host == "" || iu.RawQuery != "" || iu.Fragment != "" {
		return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
			"protected resource metadata at %s names an authorization server that is not an http(s) URL without query", DisplayURL(prmURL))
	}
	originOf := iu.Scheme + "://" + iu.Host
	p := strings.TrimRight(iu.EscapedPath(), "/")
	candidates = []string{originOf + "/.well-known/oauth-authorization-server" + p, originOf + "/.well-known/openid-configuration" + p}
	if p != "" {
		candidates = append(candidates, originOf+p+"/.well-known/openid-configuration")
	}
	var asm authorizationServerMetadata
	asURL, err := d.fetchFirst("authorization server metadata", candidates, &asm)
	if err != nil {
		return nil, err
	}
	if !SameIssuer(asm.Issuer, issuer) {
		return nil, discoveryError(mcpv1alpha1.ReasonMetadataMismatch,
			"authorization server metadata at %s names issuer %s, not the authorization server %s; no token was requested",
			DisplayURL(asURL), QuoteURL(asm.Issuer), DisplayURL(iu))
	}
	if d.Grant != "" && len(asm.GrantTypesSupported) > 0 && !slices.Contains(asm.GrantTypesSupported, d.Grant) {
		return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
			"authorization server %s does not support the %s grant", Origin(iu), d.Grant)
	}
	tu, perr := url.Parse(asm.TokenEndpoint)
	if perr != nil || asm.TokenEndpoint == "" || tu.Host == "" {
		return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
			"authorization server metadata at %s names no usable token endpoint", DisplayURL(asURL))
	}
	meta.TokenURL, meta.Issuer = tu, asm.Issuer
	meta.AuthMethods = asm.TokenEndpointAuthMethods
	meta.AuthorizationURL, meta.IssParameter = asm.AuthorizationEndpoint, asm.IssParameterSupported
	meta.CodeChallengeMethods = BoundedScopes(asm.CodeChallengeMethods)
	meta.RegistrationURL = asm.RegistrationEndpoint
	return meta, nil
}

// fetchFirst GETs each candidate in turn until one answers 200 with a JSON document,
// which it decodes into v. A 4xx moves on to the next candidate; any other failure
// ends the search.
func (d *Discovery) fetchFirst(what string, candidates []string, v any) (*url.URL, error) {
	var last string
	for _, raw := range candidates {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed, "%s URL is not an http(s) URL", what)
		}
		if u.Scheme == "http" && !d.AllowInsecureHTTP {
			return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed,
				"%s URL %s is not https; set allowInsecureHTTP to allow plain http", what, DisplayURL(u))
		}
		status, err := d.Fetch(what, u, v)
		if err != nil {
			return nil, err
		}
		if status == 200 { // OK
			return u, nil
		}
		last = fmt.Sprintf("%s answered %d", DisplayURL(u), status)
		if status < 400 || status >= 500 {
			e := discoveryError(mcpv1alpha1.ReasonTokenRequestFailed, "fetching %s: %s", what, last)
			e.Transient = status >= 500
			return nil, e
		}
	}
	return nil, discoveryError(mcpv1alpha1.ReasonTokenRequestFailed, "no %s found: %s", what, last)
}
