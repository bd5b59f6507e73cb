package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// heldReviews sits in the Authenticator's transport to the API server and holds every
// TokenReview of a token not marked valid until released, as an API server under a flood
// would keep them waiting.
type heldReviews struct {
	release chan struct{}

	mu       sync.Mutex
	valid    map[string]bool
	reviewed map[string]bool
	held     int
}

func (h *heldReviews) markValid(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.valid[token] = true
}

func (h *heldReviews) wasReviewed(token string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.reviewed[token]
}

func (h *heldReviews) holding() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (h *heldReviews) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/tokenreviews") {
			return next.RoundTrip(req)
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		review, ok := obj.(*authenticationv1.TokenReview)
		if err != nil || !ok {
			return nil, fmt.Errorf("decoding a TokenReview: %w", err)
		}
		h.mu.Lock()
		h.reviewed[review.Spec.Token] = true
		hold := !h.valid[review.Spec.Token]
		if hold {
			h.held++
		}
		h.mu.Unlock()
		if hold {
			defer func() {
				h.mu.Lock()
				h.held--
				h.mu.Unlock()
			}()
			select {
			case <-h.release:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
		}
		return next.RoundTrip(req)
	})
}

// The gateway, which shares the catalogue's Authenticator, lets fresh tokens of an
// allowed ServiceAccount in during a flood of made-up tokens (issue 26, finding 10):
// forged JWTs of the cluster's issuer, JWTs of made-up issuers and random opaque tokens
// fill every review the API server is willing to hold, and five tokens the cluster just
// issued each open a session.
func TestGatewayLetsFreshServiceAccountTokensInDuringAFlood(t *testing.T) {
	const (
		maxReviews = 4
		floodSize  = 48
		fresh      = 5
	)
	env, _ := testenv.StartForTest(t)
	held := &heldReviews{release: make(chan struct{}), valid: map[string]bool{}, reviewed: map[string]bool{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(held.wrap)
	authn, err := identity.NewAuthenticatorForConfig(cfg, identity.AuthenticatorOptions{MaxConcurrentReviews: maxReviews})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mint := func() string {
		tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{"system:serviceaccount:" + namespace + ":agent": {"notes"}}, &reviews)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = authn
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	}})

	model := mint() // never sent: the model the forged tokens copy
	var tokens []string
	forged := map[string]bool{}
	for i := range floodSize {
		switch i % 3 {
		case 0:
			token := testutil.ForgedToken(t, model)
			forged[token] = true
			tokens = append(tokens, token)
		case 1:
			tokens = append(tokens, testutil.ForeignToken(t))
		default:
			b := make([]byte, 24)
			_, _ = rand.Read(b)
			tokens = append(tokens, "flood-"+hex.EncodeToString(b))
		}
	}
	type result struct {
		token string
		code  int
	}
	answers := make(chan result, floodSize)
	for _, token := range tokens {
		go func() {
			code := initializeStatus(h.url(), token)
			answers <- result{token, code}
		}()
	}
	testutil.Eventually(t, 30*time.Second, "every flood request to be answered or held in review", func() error {
		if got := len(answers) + held.holding(); got != floodSize {
			return fmt.Errorf("%d answered, %d held; want %d in all", len(answers), held.holding(), floodSize)
		}
		return nil
	})

	for i := range fresh {
		token := mint()
		held.markValid(token)
		if resp := initialize(t, h.url(), token); resp.status != http.StatusOK {
			t.Errorf("fresh token %d of the allowed ServiceAccount during the flood: status %d, body %.200s; want 200", i+1, resp.status, resp.body)
		}
	}

	close(held.release)
	for range floodSize {
		r := <-answers
		switch {
		case r.code == http.StatusOK:
			t.Errorf("a made-up token opened a session")
		case forged[r.token] && (r.code != http.StatusUnauthorized || held.wasReviewed(r.token)):
			t.Errorf("forged token: status %d, reviewed %v; want 401 without a review", r.code, held.wasReviewed(r.token))
		}
	}
}

// initializeStatus sends an initialize request and returns its status, or 0 when it got
// no answer, for use off the test goroutine.
func initializeStatus(url, token string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
