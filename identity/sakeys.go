package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	josejwt "github.com/go-jose/go-jose/v4/jwt"
	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	k8sdiscovery "k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/switchboard-mcp/switchboard/internal/httpclient"
)

// The manager reads the API server's service-account issuer and its public keys to verify
// ServiceAccount tokens before it spends a TokenReview on them.
// +kubebuilder:rbac:urls=/.well-known/openid-configuration;/openid/v1/jwks,verbs=get

// ServiceAccountKeys returns the issuer of the cluster's ServiceAccount tokens and the
// public keys that sign them, as a JSON Web Key Set document.
type ServiceAccountKeys func(ctx context.Context) (issuer string, jwks []byte, err error)

// Paths of the API server's service-account issuer discovery.
const (
	openIDConfigurationPath = "/.well-known/openid-configuration"
	jwksPath                = "/openid/v1/jwks"
)

// maxServiceAccountKeysBytes bounds a discovery document or key set read from the API server.
const maxServiceAccountKeysBytes = 1 << 20

// APIServerServiceAccountKeys reads the service-account issuer from the API server's
// /.well-known/openid-configuration and its keys from /openid/v1/jwks, through cfg (an
// API client of its own, with the review clients' rate limit). The keys are read from the
// API server itself, not from the discovery document's jwks_uri, which names the address
// external relying parties use. The manager needs `get` on both non-resource URLs;
// Kubernetes grants it to every ServiceAccount by default
// (system:service-account-issuer-discovery), and the manager's ClusterRole asks for it too.
func APIServerServiceAccountKeys(cfg *rest.Config) (ServiceAccountKeys, error) {
	dc, err := k8sdiscovery.NewDiscoveryClientForConfig(ReviewClientConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("creating the service-account key client: %w", err)
	}
	client := dc.RESTClient()
	get := func(ctx context.Context, path string) ([]byte, error) {
		body, err := client.Get().AbsPath(path).Stream(ctx)
		if err != nil {
			return nil, fmt.Errorf("getting %s: %w", path, err)
		}
		defer body.Close()
		b, err := httpclient.ReadAll(body, maxServiceAccountKeysBytes, func() error {
			return fmt.Errorf("larger than %d bytes", maxServiceAccountKeysBytes)
		})
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		return b, nil
	}
	return func(ctx context.Context) (string, []byte, error) {
		b, err := get(ctx, openIDConfigurationPath)
		if err != nil {
			return "", nil, err
		}
		var config struct {
			Issuer string `json:"issuer"`
		}
		if err := json.Unmarshal(b, &config); err != nil || config.Issuer == "" {
			return "", nil, fmt.Errorf("the API server's %s names no issuer", openIDConfigurationPath)
		}
		jwks, err := get(ctx, jwksPath)
		if err != nil {
			return "", nil, err
		}
		return config.Issuer, jwks, nil
	}, nil
}

// legacyIssuer is the issuer of ServiceAccount tokens kept in Secrets, signed by the same
// keys as projected tokens.
const legacyIssuer = "kubernetes/serviceaccount"

// keyRefreshInterval is how often, at most, the key set is fetched again: on a token
// whose key id it does not hold, or to retry after a failed fetch. A flood of tokens with
// made-up key ids costs one fetch per interval.
const keyRefreshInterval = 10 * time.Second

// signatureAlgorithms are the algorithms a ServiceAccount token may be signed with: the
// API server signs with RS256 or ES256/384/512 depending on its key.
var signatureAlgorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// verdict is what the local check of a token decided.
type verdict int

const (
	// unverified: not a ServiceAccount token of this cluster as far as the keys tell (an
	// opaque token, a JWT of another issuer, a key id the key set lacks), or no key set
	// could be fetched. Only TokenReview can tell.
	unverified verdict = iota
	// verified: a ServiceAccount token of this cluster, signed by one of its keys, not
	// expired. TokenReview still decides (bound objects, revocation, audiences).
	verified
	// forged: it names this cluster's issuer but its signature does not verify with the
	// key it names, or it has expired or is not valid yet. No review can make it valid.
	forged
)

// keySet is the issuer and keys fetched at one time.
type keySet struct {
	issuer string
	keys   jose.JSONWebKeySet
}

// serviceAccountVerifier checks the signature, issuer and validity period of
// ServiceAccount tokens against the API server's keys, fetched once and again only on a
// key id it does not know (at most once per keyRefreshInterval). When no key set can be
// fetched it says every token is unverified and logs that once, so the Authenticator
// behaves as it did before it verified anything.
type serviceAccountVerifier struct {
	fetch   ServiceAccountKeys
	timeout time.Duration
	log     logr.Logger
	refresh *rate.Limiter

	set atomic.Pointer[keySet]

	mu       sync.Mutex
	fetching chan struct{} // closed when the fetch in flight ends; nil when none
	failing  bool          // the last fetch failed and was logged
}

func newServiceAccountVerifier(fetch ServiceAccountKeys, timeout time.Duration, log logr.Logger) *serviceAccountVerifier {
	return &serviceAccountVerifier{
		fetch:   fetch,
		timeout: timeout,
		log:     log,
		refresh: rate.NewLimiter(rate.Every(keyRefreshInterval), 1),
	}
}

// ready reports whether a key set was fetched, so that check can verify tokens, trying
// to fetch one (when the refresh limit allows) if none was.
func (v *serviceAccountVerifier) ready(ctx context.Context) bool {
	if v == nil {
		return false
	}
	return v.set.Load() != nil || v.load(ctx) != nil
}

// check decides on token, a token that passed CheckTokenShape.
func (v *serviceAccountVerifier) check(ctx context.Context, token string) verdict {
	if !meantAsJWT(token) {
		return unverified
	}
	tok, err := josejwt.ParseSigned(token, signatureAlgorithms)
	if err != nil || len(tok.Headers) != 1 {
		return unverified // an algorithm no ServiceAccount token uses
	}
	var unsafe josejwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unsafe); err != nil {
		return unverified
	}
	set := v.set.Load()
	if set == nil {
		if set = v.load(ctx); set == nil {
			return unverified
		}
	}
	if unsafe.Issuer != set.issuer && unsafe.Issuer != legacyIssuer {
		return unverified
	}
	kid := tok.Headers[0].KeyID
	keys := set.lookup(kid)
	if len(keys) == 0 {
		if set = v.load(ctx); set == nil {
			return unverified
		}
		if keys = set.lookup(kid); len(keys) == 0 {
			// A key the API server has not published (yet, as far as we know).
			return unverified
		}
	}
	for _, k := range keys {
		var claims josejwt.Claims
		if tok.Claims(k.Public().Key, &claims) != nil {
			continue
		}
		// The API server's own leeway for exp and nbf.
		if claims.ValidateWithLeeway(josejwt.Expected{Time: time.Now()}, josejwt.DefaultLeeway) != nil {
			return forged
		}
		return verified
	}
	return forged
}

// lookup returns the keys a token's key id names: every key when it names none.
func (s *keySet) lookup(kid string) []jose.JSONWebKey {
	if kid == "" {
		return s.keys.Keys
	}
	return s.keys.Key(kid)
}

// load fetches the key set when the refresh limit allows, or waits for a fetch already
// in flight, and returns the newest key set (nil when none was ever fetched).
func (v *serviceAccountVerifier) load(ctx context.Context) *keySet {
	v.mu.Lock()
	wait := v.fetching
	if wait == nil {
		if !v.refresh.Allow() {
			v.mu.Unlock()
			return v.set.Load()
		}
		wait = make(chan struct{})
		v.fetching = wait
		v.mu.Unlock()
		v.fetchNow(ctx)
		v.mu.Lock()
		v.fetching = nil
		close(wait)
		v.mu.Unlock()
		return v.set.Load()
	}
	v.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
	}
	return v.set.Load()
}

// fetchNow fetches the key set and publishes it. A failure keeps the key set there was
// and is logged once until a fetch succeeds again.
func (v *serviceAccountVerifier) fetchNow(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), v.timeout)
	defer cancel()
	set, err := v.fetchSet(ctx)
	if err != nil {
		if !v.failing {
			v.failing = true
			v.log.Info("Cannot verify ServiceAccount tokens locally; every token is sent to TokenReview with unknown tokens",
				"error", err.Error())
		}
		return
	}
	if v.failing || v.set.Load() == nil {
		v.log.Info("Verifying ServiceAccount tokens locally before TokenReview", "issuer", set.issuer, "keys", len(set.keys.Keys))
	}
	v.failing = false
	v.set.Store(set)
}

func (v *serviceAccountVerifier) fetchSet(ctx context.Context) (*keySet, error) {
	issuer, jwks, err := v.fetch(ctx)
	if err != nil {
		return nil, err
	}
	set := &keySet{issuer: issuer}
	if err := json.Unmarshal(jwks, &set.keys); err != nil {
		return nil, fmt.Errorf("decoding the service-account key set: %w", err)
	}
	var public []jose.JSONWebKey
	for _, k := range set.keys.Keys {
		if k.Valid() && k.IsPublic() && (k.Use == "" || k.Use == "sig") {
			public = append(public, k)
		}
	}
	if len(public) == 0 {
		return nil, errors.New("the service-account key set has no public signing key")
	}
	set.keys.Keys = public
	return set, nil
}

// meantAsJWT reports whether a token is meant as a JWT: it begins with "eyJ" (how the
// base64url of every JWT header begins) and has a dot. CheckTokenShape holds such tokens
// to the compact JWS form.
func meantAsJWT(token string) bool {
	return strings.HasPrefix(token, "eyJ") && strings.Contains(token, ".")
}
