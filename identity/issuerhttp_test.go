package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func TestIssuerClientRefusesAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr         string
		loopbackOnly bool
		refused      bool
	}{
		{"169.254.169.254:443", false, true},
		{"169.254.0.1:443", false, true},
		{"[::ffff:169.254.169.254]:443", false, true},
		{"[64:ff9b::a9fe:a9fe]:443", false, true}, // 169.254.169.254 through NAT64
		{"[fd00:ec2::254]:443", false, true},
		{"100.100.100.200:443", false, true},
		{"[fe80::1%eth0]:443", false, true},
		{"0.0.0.0:443", false, true},
		{"203.0.113.7:443", false, false},
		{"10.0.0.1:443", false, false},
		{"127.0.0.1:443", false, false},
		{"127.0.0.1:80", true, false},
		{"[::1]:80", true, false},
		{"10.0.0.1:80", true, true},
		{"203.0.113.7:80", true, true},
	} {
		err := checkDial(tc.addr, tc.loopbackOnly)
		if got := errors.Is(err, errAddressRefused); got != tc.refused {
			t.Errorf("checkDial(%s, loopbackOnly %v) = %v, want refused %v", tc.addr, tc.loopbackOnly, err, tc.refused)
		}
	}
}

func TestIssuerAnswersAreBounded(t *testing.T) {
	huge := strings.Repeat(" ", 2<<20)
	for _, tc := range []struct {
		name   string
		serve  func(issuer string, w http.ResponseWriter, r *http.Request)
		reason Reason
	}{
		{"discovery document", func(issuer string, w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"issuer":"` + issuer + `","jwks_uri":"` + issuer + `/keys"` + huge + `}`))
		}, ReasonDiscoveryFailed},
		{"key set", func(issuer string, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/keys" {
				_, _ = w.Write([]byte(`{"keys":[]` + huge + `}`))
				return
			}
			writeJSON(w, map[string]any{"issuer": issuer, "jwks_uri": issuer + "/keys"})
		}, ReasonKeySetFailed},
		{"redirected discovery", func(_ string, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://login.example.com/.well-known/openid-configuration", http.StatusFound)
		}, ReasonDiscoveryFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := newTestOP(t, true)
			op.wrap(func(http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.serve(op.issuer(), w, r) })
			})
			err := NewProviders(Options{}).Apply(context.Background(), op.config("p"))
			var ae *ApplyError
			if !errors.As(err, &ae) || ae.Reason != tc.reason {
				t.Fatalf("Apply: %v, want %s", err, tc.reason)
			}
			t.Log(err)
		})
	}

	t.Run("introspection answer", func(t *testing.T) {
		op := newTestOP(t, true)
		op.wrap(func(own http.Handler) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("/", own)
			mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(`{"active":true` + huge + `}`))
			})
			return mux
		})
		ps := applied(t, Options{}, op.introspecting())
		_, err := ps.Authenticate(context.Background(), "opaque-token")
		if !errors.Is(err, ErrIssuerUnavailable) {
			t.Fatalf("an oversized introspection answer: %v, want ErrIssuerUnavailable", err)
		}
	})
}

func TestIntrospectionsInFlightAreBounded(t *testing.T) {
	op := newTestOP(t, true)
	var (
		mu             sync.Mutex
		inFlight, most int
		gate           = make(chan struct{})
	)
	op.wrap(func(own http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("/", own)
		mux.HandleFunc("POST /introspect", func(w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			<-gate
			mu.Lock()
			inFlight--
			mu.Unlock()
			writeJSON(w, map[string]any{"active": false})
		})
		return mux
	})
	ps := applied(t, Options{MaxConcurrentIntrospections: 2}, op.introspecting())

	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			_, _ = ps.Authenticate(context.Background(), "opaque-"+strings.Repeat("x", i+1))
		})
	}
	testutil.Eventually(t, time.Second, "2 introspection requests in flight", func() error {
		mu.Lock()
		defer mu.Unlock()
		if inFlight != 2 {
			return fmt.Errorf("%d in flight", inFlight)
		}
		return nil
	})
	close(gate)
	wg.Wait()
	if most > 2 {
		t.Errorf("%d introspection requests were in flight at once, want at most 2", most)
	}
}

func TestHandles(t *testing.T) {
	op := newTestOP(t, true)
	ps := applied(t, Options{}, op.config("corp"))
	other := newTestOP(t, true)
	if !ps.Handles(op.sign("k1", op.claims(audience))) {
		t.Error("a JWT of an applied issuer is not handled")
	}
	if ps.Handles(other.sign("k1", other.claims(audience))) {
		t.Error("a JWT of another issuer (a Kubernetes token, say) is handled")
	}
	if ps.Handles("opaque") {
		t.Error("an opaque token is handled while no provider introspects")
	}
	if err := ps.Apply(context.Background(), other.introspecting()); err != nil {
		t.Fatal(err)
	}
	if !ps.Handles("opaque") {
		t.Error("an opaque token is not handled while a provider introspects")
	}
	// A Kubernetes bootstrap token never goes to an identity provider.
	const bootstrap = "abcdef.0123456789abcdef"
	if ps.Handles(bootstrap) {
		t.Error("a Kubernetes bootstrap token is handled")
	}
	_, before := other.counts()
	refused(t, ps, bootstrap, ReasonUnknownIssuer)
	if _, after := other.counts(); after != before {
		t.Error("a Kubernetes bootstrap token was sent to the introspection endpoint")
	}
}
