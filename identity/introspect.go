package identity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apimachinery/pkg/util/cache"
)

// clockSkew is how far in the future an nbf may lie, as go-oidc allows for JWTs.
const clockSkew = 5 * time.Minute

// introspector asks issuers about opaque tokens (RFC 7662) and remembers their answers
// briefly: by token digest, bounded in number, an active answer never past the token's
// exp, a refusal shortly; concurrent questions about one token are one question, and
// questions in flight to all issuers together are bounded.
type introspector struct {
	opts  Options
	cache *cache.LRUExpireCache // epoch/token digest -> *introspected
	slots chan struct{}
	group singleflight.Group
}

// introspected is one remembered answer: a caller or a refusal.
type introspected struct {
	caller *Caller
	err    *TokenError
}

func newIntrospector(opts Options) *introspector {
	return &introspector{
		opts:  opts,
		cache: cache.NewLRUExpireCache(opts.IntrospectionCacheSize),
		slots: make(chan struct{}, opts.MaxConcurrentIntrospections),
	}
}

// authenticateOpaque asks the one provider that introspects tokens that begin as token
// does (see Providers.introspectorFor); the token goes to no other issuer, and to none
// when no provider's token prefix matches and none takes the rest. Answers are
// remembered per set of applied providers: any Apply or Forget starts afresh.
func (ps *Providers) authenticateOpaque(ctx context.Context, token string) (*Caller, error) {
	if kubernetesBootstrapToken.MatchString(token) {
		return nil, refuse("", ReasonUnknownIssuer, "the token has the shape of a Kubernetes bootstrap token, which is never sent to an identity provider")
	}
	key := ps.cacheKey(token)
	p := ps.introspectorFor(token)
	if p == nil {
		return nil, refuse("", ReasonUnknownIssuer, "the token is not a JWT, and no identity provider introspects opaque tokens that begin as it does")
	}
	in := ps.introspections
	if v, ok := in.cache.Get(key); ok {
		return v.(*introspected).result()
	}
	ch := in.group.DoChan(key, func() (any, error) {
		if v, ok := in.cache.Get(key); ok {
			return v, nil
		}
		// The question is shared by every caller presenting this token now: it runs
		// to its own end, bounded by the client's timeout, whoever gives up waiting.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ps.opts.Timeout)
		defer cancel()
		answer, ttl := in.ask(qctx, p, token)
		if ttl > 0 {
			in.cache.Add(key, answer, ttl)
		}
		return answer, nil
	})
	select {
	case <-ctx.Done():
		return nil, unavailable("", "gave up waiting for the issuer's introspection answer: %v", ctx.Err())
	case r := <-ch:
		return r.Val.(*introspected).result()
	}
}

func (a *introspected) result() (*Caller, error) {
	if a.err != nil {
		return nil, a.err
	}
	return a.caller.clone(), nil
}

// ask asks p and returns its answer and how long to remember it (0: not at all, when
// the issuer could not be asked).
func (in *introspector) ask(ctx context.Context, p *provider, token string) (*introspected, time.Duration) {
	caller, exp, err := in.askOne(ctx, p, token)
	if err == nil {
		caller.Expiry = exp
		ttl := in.opts.IntrospectionTTL
		if !exp.IsZero() {
			ttl = min(ttl, time.Until(exp))
		}
		return &introspected{caller: caller}, ttl
	}
	var te *TokenError
	if !errors.As(err, &te) {
		te = unavailable(p.cfg.Name, "introspection failed")
	}
	if te.Unavailable {
		return &introspected{err: te}, 0
	}
	return &introspected{err: te}, in.opts.IntrospectionNegativeTTL
}

// askOne asks p's introspection endpoint about token, with p's client credentials, and
// judges the answer: active, for one of p's audiences, not expired; then maps it.
func (in *introspector) askOne(ctx context.Context, p *provider, token string) (*Caller, time.Time, error) {
	name := p.cfg.Name
	select {
	case in.slots <- struct{}{}:
		defer func() { <-in.slots }()
	case <-ctx.Done():
		return nil, time.Time{}, unavailable(name, "too many introspection requests in flight")
	}
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.introspectionURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, time.Time{}, unavailable(name, "the introspection endpoint does not make a request")
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 section 2.3.1: client credentials are form-encoded before basic auth.
	creds := p.cfg.Introspection
	req.SetBasicAuth(url.QueryEscape(creds.ClientID), url.QueryEscape(creds.ClientSecret))
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, time.Time{}, unavailable(name, "asking the introspection endpoint: %v", describeHTTPError(err))
	}
	defer func() { _ = resp.Body.Close() }()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, time.Time{}, unavailable(name, "the introspection endpoint answered %s: check the introspection client credentials", resp.Status)
	case resp.StatusCode != http.StatusOK:
		return nil, time.Time{}, unavailable(name, "the introspection endpoint answered %s", resp.Status)
	}
	body, err := readBounded(resp.Body, maxIntrospectionBytes)
	if err != nil {
		return nil, time.Time{}, unavailable(name, "reading the introspection answer: %v", err)
	}
	claims, err := decodeClaims(body)
	if err != nil {
		return nil, time.Time{}, unavailable(name, "the introspection answer is not usable: %v", err)
	}
	if active, _ := claims["active"].(bool); !active {
		return nil, time.Time{}, refuse(name, ReasonInactive, "the issuer says the token is not active")
	}
	if iss, ok := claims["iss"]; ok && iss != p.cfg.IssuerURL {
		return nil, time.Time{}, refuse(name, ReasonUnknownIssuer, "the introspection answer names another issuer")
	}
	now := time.Now()
	exp, err := numericDate(claims, "exp")
	if err != nil {
		return nil, time.Time{}, refuse(name, ReasonInvalidClaims, "%v", err)
	}
	if !exp.IsZero() && !now.Before(exp) {
		return nil, time.Time{}, refuse(name, ReasonExpired, "the token has expired")
	}
	nbf, err := numericDate(claims, "nbf")
	if err != nil {
		return nil, time.Time{}, refuse(name, ReasonInvalidClaims, "%v", err)
	}
	if !nbf.IsZero() && now.Add(clockSkew).Before(nbf) {
		return nil, time.Time{}, refuse(name, ReasonNotYetValid, "the token is not valid yet (nbf)")
	}
	if !p.introspectedAudience(claims) {
		return nil, time.Time{}, refuse(name, ReasonWrongAudience, "the token is not for this audience (aud names none of the provider's audiences)")
	}
	caller, err := p.mapCaller(ctx, claims)
	if err != nil {
		return nil, time.Time{}, err
	}
	return caller, exp, nil
}

// introspectedAudience reports whether an introspection answer is for one of p's
// audiences: aud names one when the answer has aud; otherwise the client the token was
// issued to (client_id) is one, as an ID token's aud is its client.
func (p *provider) introspectedAudience(claims map[string]any) bool {
	var names []string
	switch aud := claims["aud"].(type) {
	case string:
		names = []string{aud}
	case []any:
		for _, a := range aud {
			if s, ok := a.(string); ok {
				names = append(names, s)
			}
		}
	case nil:
		if id, ok := claims["client_id"].(string); ok {
			names = []string{id}
		}
	}
	return slices.ContainsFunc(names, func(a string) bool { return slices.Contains(p.cfg.Audiences, a) })
}

// numericDate reads an optional NumericDate claim (seconds since the epoch); zero when
// absent.
func numericDate(claims map[string]any, name string) (time.Time, error) {
	v, ok := claims[name]
	if !ok {
		return time.Time{}, nil
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1e11 {
		return time.Time{}, fmt.Errorf("the %s claim is not a date in seconds", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}
