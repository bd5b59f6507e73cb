package catalog_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// reviewWatch sits in the manager's transport to the API server and sees every
// TokenReview and SubjectAccessReview the catalogue sends. It counts TokenReviews per
// token (by digest) and how many are in flight at once, and holds the TokenReviews of
// every token not marked valid until released, so a test can keep the catalogue's
// review slots busy for as long as it needs.
type reviewWatch struct {
	release chan struct{}

	mu            sync.Mutex
	valid         map[[32]byte]bool
	perToken      map[[32]byte]int
	inFlight      int
	maxInFlight   int
	tokenReviews  int
	accessReviews int
	undecodable   int
}

func newReviewWatch() *reviewWatch {
	return &reviewWatch{
		release:  make(chan struct{}),
		valid:    map[[32]byte]bool{},
		perToken: map[[32]byte]int{},
	}
}

// markValid lets the TokenReviews of token through without holding them.
func (w *reviewWatch) markValid(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.valid[sha256.Sum256([]byte(token))] = true
}

// reviewsOf returns how many TokenReviews carried token.
func (w *reviewWatch) reviewsOf(token string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.perToken[sha256.Sum256([]byte(token))]
}

func (w *reviewWatch) counts() (inFlight, maxInFlight, tokenReviews, accessReviews, undecodable int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight, w.maxInFlight, w.tokenReviews, w.accessReviews, w.undecodable
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (w *reviewWatch) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/subjectaccessreviews"):
			w.mu.Lock()
			w.accessReviews++
			w.mu.Unlock()
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews"):
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
			// Whatever the client's content type (JSON or protobuf).
			var token string
			obj, _, decodeErr := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
			if review, ok := obj.(*authenticationv1.TokenReview); ok {
				token = review.Spec.Token
			} else if decodeErr == nil {
				decodeErr = fmt.Errorf("decoded a %T", obj)
			}
			key := sha256.Sum256([]byte(token))
			w.mu.Lock()
			if decodeErr != nil {
				w.undecodable++
			}
			w.tokenReviews++
			w.perToken[key]++
			w.inFlight++
			w.maxInFlight = max(w.maxInFlight, w.inFlight)
			hold := !w.valid[key]
			w.mu.Unlock()
			defer func() {
				w.mu.Lock()
				w.inFlight--
				w.mu.Unlock()
			}()
			if hold {
				select {
				case <-w.release:
				case <-req.Context().Done():
					return nil, req.Context().Err()
				}
			}
		}
		return next.RoundTrip(req)
	})
}

// attempt is one request of a flood: its status code and Retry-After header, or the
// error that kept it from getting an answer.
type attempt struct {
	token      string
	code       int
	retryAfter string
	err        error
}

// try requests path with token without failing the test, for use from goroutines.
func (r *running) try(token, path string) attempt {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return attempt{token: token, err: err}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return attempt{token: token, err: err}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return attempt{token: token, code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
}

// randomToken returns a token no API server accepts: random hex, as a flood would send.
func randomToken(t *testing.T) string {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "flood-" + hex.EncodeToString(b)
}

// A flood of bogus tokens (issue 12, finding 3) neither locks out callers whose token is
// cached nor costs more than a bounded number of TokenReviews at a time: while every
// review slot is busy with bogus tokens, further unknown tokens get 429 with Retry-After,
// malformed tokens get 401 without any review, cached callers keep getting 200 over REST
// and MCP, and their SubjectAccessReviews still go through. A failed token is reviewed
// once, and a flood of them does not push valid tokens out of the cache.
func TestTokenFloodDoesNotLockOutCachedCallers(t *testing.T) {
	const (
		maxReviews   = 4
		cacheSize    = 16
		floodBurst   = 64
		evictionRuns = 3 * cacheSize
	)
	watch := newReviewWatch()
	requireEnv(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(watch.wrap)
	c := startCatalogOn(t, cfg, catalog.AuthTokenReview, func(o *catalog.Options) {
		o.MaxConcurrentTokenReviews = maxReviews
		o.TokenCacheSize = cacheSize
		o.NegativeCacheSize = cacheSize
		o.AuthCacheTTL = 10 * time.Minute // no entry expires during the test
		o.NegativeCacheTTL = 10 * time.Minute
	})
	ns, other := newNamespace(t), newNamespace(t)
	createServer(t, ns, serverSpec{name: "github", tools: []mcpv1alpha1.ToolInfo{tool("search_issues", "", "Search issues")}})
	createServer(t, other, serverSpec{name: "jira", tools: []mcpv1alpha1.ToolInfo{tool("search_tickets", "", "Search tickets")}})
	cached := newCaller(t, ns, "agent", true)
	grantList(t, other, ns, "agent")
	latecomer := newCaller(t, ns, "latecomer", true)
	watch.markValid(cached)
	watch.markValid(latecomer)
	c.waitServers(t, cached, ns, 1)
	if n := watch.reviewsOf(cached); n != 1 {
		t.Fatalf("TokenReviews of the cached caller's token before the flood = %d, want 1", n)
	}

	// Fill every review slot with bogus tokens whose reviews the API server holds.
	held := make(chan attempt, maxReviews)
	var heldTokens []string
	for range maxReviews {
		token := randomToken(t)
		heldTokens = append(heldTokens, token)
		go func() { held <- c.try(token, "/api/v1/servers") }()
	}
	testutil.Eventually(t, waitTimeout, "the review slots to fill", func() error {
		if n, _, _, _, _ := watch.counts(); n != maxReviews {
			return fmt.Errorf("%d TokenReviews in flight, want %d", n, maxReviews)
		}
		return nil
	})

	// Every further unknown token is turned away at once, without a review.
	flood := make(chan attempt, floodBurst)
	var wg sync.WaitGroup
	for range floodBurst {
		token := randomToken(t)
		wg.Go(func() { flood <- c.try(token, "/api/v1/tools?q=search") })
	}
	wg.Wait()
	close(flood)
	for a := range flood {
		if a.err != nil || a.code != http.StatusTooManyRequests || a.retryAfter == "" {
			t.Errorf("unknown token while every review slot is busy: code %d, Retry-After %q, error %v; want 429 with Retry-After", a.code, a.retryAfter, a.err)
		}
	}

	if code := mcpStatus(t, c, randomToken(t)); code != http.StatusTooManyRequests {
		t.Errorf("MCP initialize with an unknown token while every review slot is busy: %d, want 429", code)
	}

	// Malformed tokens are rejected before any review, even now.
	malformed := []string{
		"flood-tökén",                           // not ASCII
		"eyJub3QganNvbiB9.eyJzdWIiOiJ4In0.c2ln", // looks like a JWT, header is not JSON
		"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0",  // two segments
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln.ZXh0cmE", // four segments
		"eyJhbGciOiJSUzI1NiJ9.%%%.c2ln",         // payload is not base64url
		"eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",  // alg none, no signature
		strings.Repeat("a", 9<<10),              // too long
	}
	for _, token := range malformed {
		if a := c.try(token, "/api/v1/servers"); a.err != nil || a.code != http.StatusUnauthorized {
			t.Errorf("malformed token %.24q: code %d, error %v; want 401", token, a.code, a.err)
		}
		if n := watch.reviewsOf(token); n != 0 {
			t.Errorf("malformed token %.24q was sent to TokenReview %d times", token, n)
		}
	}

	// The cached caller does not notice: REST, a namespace whose access it has not been
	// reviewed for yet (a SubjectAccessReview, on its own budget), and MCP.
	for range 20 {
		var l catalog.ServerList
		c.getJSON(t, cached, "/api/v1/servers?namespace="+ns, &l)
		if len(l.Items) != 1 {
			t.Fatalf("cached caller during the flood sees %q, want %s/github", serverNames(l), ns)
		}
	}
	_, _, _, sarsBefore, _ := watch.counts()
	var l catalog.ServerList
	c.getJSON(t, cached, "/api/v1/servers?namespace="+other, &l)
	if got := serverNames(l); len(got) != 1 || got[0] != other+"/jira" {
		t.Errorf("cached caller in a second namespace during the flood sees %q, want %s/jira", got, other)
	}
	if _, _, _, sars, _ := watch.counts(); sars <= sarsBefore {
		t.Errorf("the second namespace needed no SubjectAccessReview (%d before, %d after): the check above proves nothing", sarsBefore, sars)
	}
	if code := mcpStatus(t, c, cached); code != http.StatusOK {
		t.Errorf("MCP initialize by the cached caller during the flood: %d, want 200", code)
	}

	// Released, the held reviews fail; a failed token is not reviewed again.
	close(watch.release)
	for range maxReviews {
		if a := <-held; a.err != nil || a.code != http.StatusUnauthorized {
			t.Errorf("held bogus token: code %d, error %v; want 401", a.code, a.err)
		}
	}
	for _, token := range heldTokens[:1] {
		if a := c.try(token, "/api/v1/servers"); a.code != http.StatusUnauthorized {
			t.Errorf("repeated bogus token: code %d, want 401", a.code)
		}
		if n := watch.reviewsOf(token); n != 1 {
			t.Errorf("repeated bogus token reviewed %d times, want 1 (failures are cached)", n)
		}
	}

	// Many more failed tokens than the caches hold do not evict the cached caller.
	for range evictionRuns {
		if a := c.try(randomToken(t), "/api/v1/servers"); a.err != nil || a.code != http.StatusUnauthorized {
			t.Fatalf("bogus token after the flood: code %d, error %v; want 401", a.code, a.err)
		}
	}
	c.getJSON(t, cached, "/api/v1/servers?namespace="+ns, &l)
	if n := watch.reviewsOf(cached); n != 1 {
		t.Errorf("TokenReviews of the cached caller's token = %d, want 1: the flood evicted it", n)
	}

	// A caller seen for the first time after the flood gets in.
	c.getJSON(t, latecomer, "/api/v1/servers?namespace="+ns, &l)
	if len(l.Items) != 1 {
		t.Errorf("latecomer sees %q, want %s/github", serverNames(l), ns)
	}

	_, maxInFlight, reviews, _, undecodable := watch.counts()
	if maxInFlight > maxReviews {
		t.Errorf("%d TokenReviews were in flight at once, want at most %d", maxInFlight, maxReviews)
	}
	if undecodable != 0 {
		t.Errorf("%d TokenReview bodies could not be decoded, so per-token counts are unreliable", undecodable)
	}
	// The cached caller, the latecomer, the held tokens and the eviction run: nothing
	// from the 429 burst or the malformed tokens.
	if want := 2 + maxReviews + evictionRuns; reviews != want {
		t.Errorf("TokenReviews = %d, want %d", reviews, want)
	}
}

// BenchmarkTokenFlood replays issue 12's finding 3 against the real API server with the
// catalogue's defaults: 300 workers send random tokens while 5 callers with cached
// tokens keep asking, and it prints what each side got. Run it alone:
//
//	go test -run '^$' -bench BenchmarkTokenFlood -benchtime 1x ./catalog/
func BenchmarkTokenFlood(b *testing.B) {
	const (
		floodWorkers     = 300
		floodPerWorker   = 20
		callers          = 5
		requestsPerPhase = 200
	)
	watch := newReviewWatch()
	close(watch.release) // hold nothing
	requireEnv(b)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(watch.wrap)
	c := startCatalogOn(b, cfg, catalog.AuthTokenReview, func(o *catalog.Options) { o.AuthCacheTTL = 10 * time.Minute })
	ns := newNamespace(b)
	createServer(b, ns, serverSpec{name: "github", tools: []mcpv1alpha1.ToolInfo{tool("search_issues", "", "Search issues")}})
	var tokens []string
	for i := range callers {
		token := newCaller(b, ns, fmt.Sprintf("agent-%d", i), true)
		watch.markValid(token)
		tokens = append(tokens, token)
	}
	for _, token := range tokens {
		c.waitServers(b, token, ns, 1)
	}
	path := "/api/v1/servers?namespace=" + ns

	// measure has every caller send requestsPerPhase requests, one after another.
	measure := func() (lat []time.Duration, codes map[int]int) {
		codes = map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, token := range tokens {
			wg.Go(func() {
				for range requestsPerPhase {
					start := time.Now()
					a := c.try(token, path)
					mu.Lock()
					lat = append(lat, time.Since(start))
					codes[a.code]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		slices.Sort(lat)
		return lat, codes
	}
	quiet, quietCodes := measure()
	_, _, reviewsBefore, _, _ := watch.counts()

	b.ResetTimer()
	floodCodes := map[int]int{}
	var mu sync.Mutex
	var flood sync.WaitGroup
	start := time.Now()
	for range floodWorkers {
		flood.Go(func() {
			for range floodPerWorker {
				tok := make([]byte, 24)
				_, _ = rand.Read(tok)
				a := c.try(hex.EncodeToString(tok), path)
				mu.Lock()
				floodCodes[a.code]++
				mu.Unlock()
			}
		})
	}
	loud, loudCodes := measure()
	flood.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	_, maxInFlight, reviews, _, _ := watch.counts()
	fmt.Printf("token flood: %d workers x %d random tokens in %s; %d callers x %d requests with cached tokens\n",
		floodWorkers, floodPerWorker, elapsed.Round(time.Millisecond), callers, requestsPerPhase)
	fmt.Printf("  flood answers: %v; TokenReviews sent %d (at most %d at once)\n", floodCodes, reviews-reviewsBefore, maxInFlight)
	for _, r := range []struct {
		name  string
		lat   []time.Duration
		codes map[int]int
	}{{"cached callers, quiet:", quiet, quietCodes}, {"cached callers, flood:", loud, loudCodes}} {
		fmt.Printf("  %s codes %v  p50 %.3f ms  p99 %.3f ms  max %.3f ms\n", r.name, r.codes,
			ms(r.lat[len(r.lat)/2]), ms(r.lat[len(r.lat)*99/100]), ms(r.lat[len(r.lat)-1]))
	}
	b.ReportMetric(ms(loud[len(loud)*99/100]), "cached-p99-ms")
	b.ReportMetric(float64(reviews-reviewsBefore), "reviews")
	if loudCodes[http.StatusOK] != callers*requestsPerPhase {
		b.Errorf("cached callers during the flood got %v, want only 200", loudCodes)
	}
	if floodCodes[http.StatusInternalServerError] > 0 {
		b.Errorf("the flood got %d answers 500", floodCodes[http.StatusInternalServerError])
	}
}
