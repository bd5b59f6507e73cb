package identity

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// jwt builds a compact JWS from a header and claims (JSON) and a signature.
func jwt(header, claims, sig string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(claims)) + "." + enc([]byte(sig))
}

func TestCheckTokenShape(t *testing.T) {
	saToken := jwt(`{"alg":"RS256","kid":"k1"}`, `{"aud":["https://kubernetes.default.svc"],"exp":1893456000,"iss":"https://kubernetes.default.svc","sub":"system:serviceaccount:a:b"}`, "signature")
	for _, tc := range []struct {
		name, token string
		ok          bool
		expiry      time.Time
	}{
		{"ServiceAccount token", saToken, true, time.Unix(1893456000, 0)},
		{"JWT without exp", jwt(`{"alg":"ES256"}`, `{"sub":"x"}`, "s"), true, time.Time{}},
		{"JWT header with spaces", jwt(`{"typ": "JWT", "alg": "RS256"}`, `{}`, "s"), true, time.Time{}},
		{"bootstrap token", "abcdef.0123456789abcdef", true, time.Time{}},
		{"static hex token", "31ada4fd-adec-460c-809a-9e56ceb75269", true, time.Time{}},
		{"static base64 token", "c2VjcmV0+/c2VjcmV0==", true, time.Time{}},
		{"opaque token beginning with eyJ, no dot", "eyJzb21ldGhpbmc", true, time.Time{}},
		{"opaque punctuation", "a!b#c$d%e&f'g(h)i*j,k:l;m<n>o?p@q[r]s^t`u{v|w}x~y", true, time.Time{}},
		{"longest", strings.Repeat("a", maxBearerTokenBytes), true, time.Time{}},

		{"empty", "", false, time.Time{}},
		{"too long", strings.Repeat("a", maxBearerTokenBytes+1), false, time.Time{}},
		{"space", "abc def", false, time.Time{}},
		{"tab", "abc\tdef", false, time.Time{}},
		{"NUL", "abc\x00def", false, time.Time{}},
		{"non-ASCII", "tökén", false, time.Time{}},
		{"JWT with two segments", strings.Join(strings.Split(saToken, ".")[:2], "."), false, time.Time{}},
		{"JWT with four segments", saToken + ".ZXh0cmE", false, time.Time{}},
		{"JWE (five segments)", saToken + ".a.b", false, time.Time{}},
		{"JWT header not JSON", "eyJub3QganNvbiB9.e30.c2ln", false, time.Time{}},
		{"JWT alg not a string", jwt(`{"alg":["RS256"]}`, `{}`, "s"), false, time.Time{}},
		{"dotted token not beginning with eyJ", jwt(`["alg"]`, `{}`, "s"), true, time.Time{}},
		{"JWT header without alg", jwt(`{"typ":"JWT"}`, `{}`, "s"), false, time.Time{}},
		{"JWT alg none", jwt(`{"alg":"none"}`, `{}`, "s"), false, time.Time{}},
		{"JWT claims null", jwt(`{"alg":"RS256"}`, `null`, "s"), false, time.Time{}},
		{"JWT claims not base64url", "eyJhbGciOiJSUzI1NiJ9.%%%.c2ln", false, time.Time{}},
		{"JWT padded", jwt(`{"alg":"RS256"}`, `{}`, "s") + "==", false, time.Time{}},
		{"JWT without signature", strings.TrimSuffix(saToken, strings.Split(saToken, ".")[2]), false, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expiry, err := CheckTokenShape(tc.token)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckTokenShape(%.40q) = %v, want ok %v", tc.token, err, tc.ok)
			}
			if err != nil && !errors.Is(err, errMalformedToken) {
				t.Errorf("error %v does not wrap errMalformedToken", err)
			}
			if !expiry.Equal(tc.expiry) {
				t.Errorf("expiry = %v, want %v", expiry, tc.expiry)
			}
		})
	}
}

func FuzzCheckTokenShape(f *testing.F) {
	f.Add(jwt(`{"alg":"RS256"}`, `{"exp":1}`, "s"))
	f.Add("abcdef.0123456789abcdef")
	f.Add("eyJ.eyJ.eyJ")
	f.Fuzz(func(t *testing.T, token string) {
		if _, err := CheckTokenShape(token); err != nil {
			return
		}
		if token == "" || len(token) > maxBearerTokenBytes || strings.ContainsFunc(token, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			t.Errorf("accepted %q", token)
		}
	})
}

// fakeReviews is a TokenReview client that authenticates the tokens in valid, counts
// reviews and, while hold is open, holds every review until hold is closed.
type fakeReviews struct {
	authenticationv1client.TokenReviewInterface

	hold      chan struct{}
	audiences []string

	mu       sync.Mutex
	valid    map[string]string
	calls    int
	inFlight int
}

func (f *fakeReviews) Create(ctx context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.mu.Lock()
	f.calls++
	f.inFlight++
	user, ok := f.valid[tr.Spec.Token]
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}()
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := tr.DeepCopy()
	out.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: authenticationv1.UserInfo{Username: user}, Audiences: f.audiences}
	return out, nil
}

func (f *fakeReviews) counts() (calls, inFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.inFlight
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Callers of one token share one review, and a failure is reviewed once.
func TestAuthenticatorSharesReviewsAndRemembersFailures(t *testing.T) {
	unknown := &fakeReviews{valid: map[string]string{"good": "alice"}, hold: make(chan struct{})}
	a := NewAuthenticator(unknown, nil, AuthenticatorOptions{MaxConcurrentReviews: 1})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			id, err := a.Authenticate(context.Background(), "good")
			if err == nil && id.Username != "alice" {
				err = errors.New("wrong user " + id.Username)
			}
			errs <- err
		})
	}
	waitUntil(t, func() bool { _, n := unknown.counts(); return n == 1 })
	close(unknown.hold)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Authenticate(good): %v", err)
		}
	}
	for range 3 {
		if _, err := a.Authenticate(context.Background(), "bad"); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("Authenticate(bad) = %v, want ErrUnauthenticated", err)
		}
	}
	if calls, _ := unknown.counts(); calls != 2 {
		t.Errorf("TokenReviews = %d, want 2 (one per token)", calls)
	}
}

// A token that authenticated before is re-reviewed in its own lane when its entry
// expires, however busy the lane for unknown tokens is; unknown tokens beyond the bound
// get ErrTooManyReviews.
func TestAuthenticatorKnownTokensBypassAFlood(t *testing.T) {
	unknown := &fakeReviews{valid: map[string]string{"good": "alice"}}
	known := &fakeReviews{valid: map[string]string{"good": "alice"}}
	a := NewAuthenticator(unknown, known, AuthenticatorOptions{MaxConcurrentReviews: 2, TTL: time.Nanosecond})
	if _, err := a.Authenticate(context.Background(), "good"); err != nil {
		t.Fatal(err)
	}
	unknown.hold = make(chan struct{})
	defer close(unknown.hold)
	for _, token := range []string{"flood-1", "flood-2"} {
		go func() { _, _ = a.Authenticate(context.Background(), token) }()
	}
	waitUntil(t, func() bool { _, n := unknown.counts(); return n == 2 })
	if _, err := a.Authenticate(context.Background(), "flood-3"); !errors.Is(err, ErrTooManyReviews) {
		t.Errorf("Authenticate(flood-3) with every slot busy = %v, want ErrTooManyReviews", err)
	}
	if _, err := a.Authenticate(context.Background(), "not ascii \x01"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("Authenticate(malformed) = %v, want ErrUnauthenticated", err)
	}
	for range 3 {
		id, err := a.Authenticate(context.Background(), "good")
		if err != nil || id.Username != "alice" {
			t.Fatalf("known token during the flood: %v, %v", id, err)
		}
	}
	if calls, _ := known.counts(); calls != 3 {
		t.Errorf("re-reviews of the known token = %d, want 3 (its entry expires at once)", calls)
	}
	if calls, _ := unknown.counts(); calls != 3 {
		t.Errorf("reviews of unknown tokens = %d, want 3 (good once, two held floods)", calls)
	}
}

// A JWT is trusted no longer than its exp claim, and a review whose audiences do not
// include the one asked for does not authenticate.
func TestAuthenticatorHonoursExpiryAndAudiences(t *testing.T) {
	expired := jwt(`{"alg":"RS256"}`, `{"exp":1000000000}`, "s")
	reviews := &fakeReviews{valid: map[string]string{expired: "alice", "good": "bob"}, audiences: []string{"other"}}
	a := NewAuthenticator(reviews, nil, AuthenticatorOptions{TTL: time.Hour})
	if _, err := a.Authenticate(context.Background(), "good"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := a.Authenticate(context.Background(), expired); err != nil {
			t.Fatal(err)
		}
	}
	if calls, _ := reviews.counts(); calls != 3 {
		t.Errorf("TokenReviews = %d, want 3: the expired token is never served from the cache", calls)
	}

	b := NewAuthenticator(reviews, nil, AuthenticatorOptions{Audiences: []string{"switchboard"}})
	if _, err := b.Authenticate(context.Background(), "good"); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("review for another audience = %v, want ErrUnauthenticated", err)
	}
}
