package catalog_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// mintToken returns a new token of the ServiceAccount ns/name from the TokenRequest API,
// as the kubelet gets one for a new pod or an hourly rotation.
func mintToken(tb testing.TB, ns, name string) string {
	tb.Helper()
	tr, err := clientset.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return tr.Status.Token
}

// A flood of made-up bearer tokens (issue 26, finding 10) does not lock out fresh tokens
// of an allowed ServiceAccount: while JWTs that claim the cluster's issuer but carry a
// forged signature, JWTs of made-up issuers and random opaque tokens pour in, and the API
// server holds every review it gets of them, five tokens the cluster just issued (a new
// pod, an hourly rotation) each get 200. The forged tokens get 401 without a TokenReview.
func TestFreshServiceAccountTokensGetInDuringAFloodOfForgedTokens(t *testing.T) {
	const (
		maxReviews = 4
		floodSize  = 48
		fresh      = 5
	)
	watch := newReviewWatch()
	requireEnv(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(watch.wrap)
	c := startCatalogOn(t, cfg, catalog.AuthTokenReview, func(o *catalog.Options) {
		o.MaxConcurrentTokenReviews = maxReviews
	})
	ns := newNamespace(t)
	createServer(t, ns, serverSpec{name: "github", tools: []mcpv1alpha1.ToolInfo{tool("search_issues", "", "Search issues")}})
	// A token of the ServiceAccount, never sent: the model the forged tokens copy.
	model := newCaller(t, ns, "agent", true)
	path := "/api/v1/servers?namespace=" + ns

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
			tokens = append(tokens, randomToken(t))
		}
	}
	floodAnswers := flood(t, tokens, func(token string) attempt { return c.try(token, path) }, watch)

	for i := range fresh {
		token := mintToken(t, ns, "agent")
		watch.markValid(token)
		if a := c.try(token, path); a.err != nil || a.code != http.StatusOK {
			t.Errorf("fresh token %d of the allowed ServiceAccount during the flood: code %d, error %v; want 200", i+1, a.code, a.err)
		}
	}

	close(watch.release)
	for _, a := range floodAnswers() {
		switch {
		case a.err != nil:
			t.Errorf("flood request: %v", a.err)
		case a.code == http.StatusOK:
			t.Errorf("a made-up token got 200")
		}
	}
	for _, a := range floodAnswers() {
		if forged[a.token] && (a.code != http.StatusUnauthorized || watch.reviewsOf(a.token) != 0) {
			t.Errorf("forged token: code %d after %d TokenReviews; want 401 without a review", a.code, watch.reviewsOf(a.token))
		}
	}
}

// flood sends one request with each token at once and waits until each was either
// answered or is held in a TokenReview by watch. The function it returns waits for every
// answer (release watch first).
func flood(t *testing.T, tokens []string, send func(string) attempt, watch *reviewWatch) func() []attempt {
	t.Helper()
	n := len(tokens)
	answers := make(chan attempt, n)
	for _, token := range tokens {
		go func() { answers <- send(token) }()
	}
	testutil.Eventually(t, waitTimeout, "every flood request to be answered or held in review", func() error {
		inFlight, _, _, _, _ := watch.counts()
		if got := len(answers) + inFlight; got != n {
			return fmt.Errorf("%d answered, %d held; want %d in all", len(answers), inFlight, n)
		}
		return nil
	})
	var all []attempt
	return func() []attempt {
		for len(all) < n {
			all = append(all, <-answers)
		}
		return all
	}
}
