package connector

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/switchboard-mcp/switchboard/connector/oauth"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// Token types (RFC 8693 section 3, SEP-990) and grants of the per-caller flows.
const (
	// TokenTypeAccessToken is an OAuth 2.0 access token.
	TokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token" //nolint:gosec // a token type name, not a credential
	// TokenTypeJWT is a JWT.
	TokenTypeJWT = "urn:ietf:params:oauth:token-type:jwt" //nolint:gosec // a token type name, not a credential
	// TokenTypeIDToken is an OpenID Connect ID token.
	TokenTypeIDToken = oauthex.TokenTypeIDToken
	// TokenTypeIDJAG is an identity assertion JWT authorization grant (SEP-990).
	TokenTypeIDJAG = oauthex.TokenTypeIDJAG

	grantTokenExchange = oauthex.GrantTypeTokenExchange
	// anyGrant tells discovery not to require any grant of the authorization server.
	anyGrant = "*"
)

// tokenRequest is one token request of a per-caller flow: an RFC 8693 exchange at a
// token service or identity provider, or an RFC 7523 jwt-bearer grant at the server's
// authorization server.
type tokenRequest struct {
	// what names the request in messages: "token exchange", say.
	what string
	url  *url.URL
	// clientID and clientSecret authenticate the client: client_secret_basic, or
	// client_id alone in the body when there is no secret.
	clientID, clientSecret string
	scopes                 []string
	// params are grant_type and the grant's own parameters.
	params url.Values
}

// post sends r through the session's stack (c.ts's client: the session's dialer and
// egress decider, redirect checks that never let a token request leave its origin,
// responses bounded to maxOAuthDocumentBytes) and returns the token response. Its
// errors name the request and the endpoint's origin and carry nothing r sent.
//
// It is the one place the per-caller flows speak OAuth; the jwt-bearer grant goes
// through clientcredentials.Config with grant_type overridden, as golang.org/x/oauth2
// allows. oauthex.ExchangeToken would do for the exchange but sends the client secret
// in the body only (client_secret_post), where the API promises client_secret_basic.
func (c *callerTokens) post(r tokenRequest) (tok *oauth2.Token, e *Error) {
	_, span := c.ts.stack.startTokenSpan(context.Background(), grantOf(r), r.url)
	defer func() { endTokenSpan(span, e) }()
	// Judged at every request: plain http only to a loopback address by itself.
	if e := c.ts.checkTokenURL(r.url); e != nil {
		return nil, authError(e.Reason, ReasonTokenRequestFailed,
			"%s endpoint %s is not https: the caller's token is sent only over https (or plain http to a loopback address with allowInsecureHTTP)",
			r.what, oauth.Origin(r.url))
	}
	cc := clientcredentials.Config{
		ClientID:       r.clientID,
		ClientSecret:   r.clientSecret,
		TokenURL:       r.url.String(),
		Scopes:         r.scopes,
		EndpointParams: r.params,
		AuthStyle:      oauth2.AuthStyleInHeader,
	}
	if r.clientSecret == "" {
		cc.AuthStyle = oauth2.AuthStyleInParams // client_id alone, in the body
	}
	ctx, cancel := context.WithTimeout(tracing.CarryOver(c.ts.ctx, trace.ContextWithSpan(context.Background(), span)), c.ts.timeout)
	defer cancel()
	capture := &fetchCapture{}
	ctx = context.WithValue(ctx, fetchCaptureKey{}, capture)
	ctx = context.WithValue(ctx, oauth2.HTTPClient, c.ts.client)
	tok, err := cc.Token(ctx)
	if err != nil {
		return nil, tokenRequestError(r.what+" at "+oauth.Origin(r.url), r.clientID, r.scopes, err, capture)
	}
	return tok, nil
}

// grantOf names the grant of a per-caller token request for its span.
func grantOf(r tokenRequest) string {
	switch r.params.Get("grant_type") {
	case grantTokenExchange:
		return "token_exchange"
	case oauth.GrantTypeJWTBearer:
		return "jwt_bearer"
	}
	return "token_request"
}

// checkIssuedType refuses an RFC 8693 response whose issued_token_type is not the one
// requested (or is missing, which RFC 8693 section 2.2.1 does not allow).
func checkIssuedType(r tokenRequest, tok *oauth2.Token, want string) *Error {
	got, _ := tok.Extra("issued_token_type").(string)
	if got == want {
		return nil
	}
	shown := "none"
	if got != "" {
		shown = fmt.Sprintf("%q", oauth.SafeText(got, 128))
	}
	return authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
		"%s at %s issued token type %s, not the %s requested; the token was not used",
		r.what, oauth.Origin(r.url), shown, want)
}

// checkBearer refuses a token response that is not a bearer access token.
func checkBearer(r tokenRequest, tok *oauth2.Token) *Error {
	if tok.AccessToken != "" && strings.EqualFold(tok.Type(), "Bearer") {
		return nil
	}
	return authError(ReasonTokenRequestFailed, ReasonTokenRequestFailed,
		"%s at %s issued no bearer token (token_type %q)", r.what, oauth.Origin(r.url), oauth.SafeText(tok.TokenType, 32))
}
