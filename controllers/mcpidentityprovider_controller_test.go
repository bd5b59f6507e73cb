package controllers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// fakeProviders records what the reconciler applies and forgets, and fails Apply for
// the providers a test says.
type fakeProviders struct {
	mu        sync.Mutex
	applied   map[string][]identity.ProviderConfig
	forgotten map[string]int
	fail      map[string]error
}

func newFakeProviders() *fakeProviders {
	return &fakeProviders{applied: map[string][]identity.ProviderConfig{}, forgotten: map[string]int{}, fail: map[string]error{}}
}

func (f *fakeProviders) Apply(_ context.Context, cfg identity.ProviderConfig) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied[cfg.Name] = append(f.applied[cfg.Name], cfg)
	return f.fail[cfg.Name]
}

func (f *fakeProviders) Forget(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten[name]++
}

func (f *fakeProviders) setFail(name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[name] = err
}

// last returns the last config applied for name.
func (f *fakeProviders) last(name string) (identity.ProviderConfig, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	configs := f.applied[name]
	if len(configs) == 0 {
		return identity.ProviderConfig{}, 0
	}
	return configs[len(configs)-1], len(configs)
}

func (f *fakeProviders) forgets(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forgotten[name]
}

// startIdentityOperator runs a manager with the MCPIdentityProvider reconciler only,
// its cluster resource namespace set to namespace. It returns the manager's logs.
func startIdentityOperator(t *testing.T, namespace string, providers controllers.IdentityProviders, options ...func(*controllers.MCPIdentityProviderReconciler)) *syncBuffer {
	t.Helper()
	logs := &syncBuffer{}
	log := zap.New(zap.WriteTo(logs), zap.Level(zapcore.Level(-2)))
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Logger:                 log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controllers.MCPIdentityProviderReconciler{
		Client:         mgr.GetClient(),
		SecretReader:   mgr.GetAPIReader(),
		Namespace:      namespace,
		Providers:      providers,
		Recorder:       mgr.GetEventRecorder("switchboard"),
		Elected:        mgr.Elected(),
		RetryBaseDelay: 50 * time.Millisecond,
		RetryMaxDelay:  200 * time.Millisecond,
	}
	for _, o := range options {
		o(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), log))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with an error: %v", err)
		}
	})
	return logs
}

// newProvider creates an MCPIdentityProvider named after the test's namespace (the kind
// is cluster-scoped), deleted at cleanup.
func newProvider(t *testing.T, namespace, name string, mutate func(*mcpv1alpha1.MCPIdentityProviderSpec)) *mcpv1alpha1.MCPIdentityProvider {
	t.Helper()
	p := &mcpv1alpha1.MCPIdentityProvider{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
		Spec: mcpv1alpha1.MCPIdentityProviderSpec{
			Issuer: mcpv1alpha1.IdentityIssuer{URL: "https://login.example.com", Audiences: []string{"https://mcp.example.com"}},
			ClaimMappings: mcpv1alpha1.ClaimMappings{
				Username: mcpv1alpha1.UsernameClaimMapping{Claim: "email", Prefix: "oidc:"},
			},
		},
	}
	if mutate != nil {
		mutate(&p.Spec)
	}
	if err := k8sClient.Create(context.Background(), p); err != nil {
		t.Fatalf("creating provider: %v", err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(k8sClient.Delete(context.Background(), p)) })
	return p
}

// providerReady waits until the provider's Ready condition has the status and reason,
// for its current generation, and returns the provider.
func providerReady(t *testing.T, name string, status metav1.ConditionStatus, reason string) *mcpv1alpha1.MCPIdentityProvider {
	t.Helper()
	p := &mcpv1alpha1.MCPIdentityProvider{}
	testutil.Eventually(t, 20*time.Second, fmt.Sprintf("Ready=%s/%s", status, reason), func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, mcpv1alpha1.ConditionReady)
		switch {
		case c == nil:
			return errors.New("no Ready condition")
		case c.Status != status || c.Reason != reason:
			return fmt.Errorf("Ready is %s/%s: %s", c.Status, c.Reason, c.Message)
		case p.Status.ObservedGeneration != p.Generation:
			return fmt.Errorf("observedGeneration %d, generation %d", p.Status.ObservedGeneration, p.Generation)
		}
		return nil
	})
	return p
}

func conditionOf(p *mcpv1alpha1.MCPIdentityProvider, condType string) string {
	c := meta.FindStatusCondition(p.Status.Conditions, condType)
	if c == nil {
		return "absent"
	}
	return string(c.Status) + "/" + c.Reason
}

// providerEvents returns the reasons and notes of the Events about the provider; those
// of a cluster-scoped object go to the default namespace.
func providerEvents(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, metav1.NamespaceDefault, name) {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out
}

// waitForEvent waits for an Event of the provider with the reason.
func waitForEvent(t *testing.T, name, reason string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, "Event "+reason, func() error {
		for _, e := range providerEvents(t, name) {
			if strings.HasPrefix(e, reason+": ") {
				return nil
			}
		}
		return fmt.Errorf("events so far: %q", providerEvents(t, name))
	})
}

// caPEM returns a self-signed CA certificate, PEM-encoded.
func caPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func putSecret(t *testing.T, namespace, name string, data map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(secret), secret); err == nil {
		secret.Data = data
		if err := k8sClient.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		return
	}
	secret.Data = data
	if err := k8sClient.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
}

// introspected sets an introspection client whose secret is in Secret "introspection".
func introspected(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
	spec.Introspection = &mcpv1alpha1.TokenIntrospection{
		ClientID:     "switchboard-gateway",
		ClientSecret: mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "introspection", Key: "client-secret"}},
	}
}

// assertNoSecret fails when value appears in the provider's status, its Events or the
// manager's logs.
func assertNoSecret(t *testing.T, name, value string, logs *syncBuffer) {
	t.Helper()
	p := &mcpv1alpha1.MCPIdentityProvider{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if strings.Contains(c.Message, value) {
			t.Errorf("condition %s shows the secret: %s", c.Type, c.Message)
		}
	}
	for _, e := range providerEvents(t, name) {
		if strings.Contains(e, value) {
			t.Errorf("an Event shows the secret: %s", e)
		}
	}
	if strings.Contains(logs.String(), value) {
		t.Errorf("the manager's logs show the secret")
	}
}

func TestIdentityProviderIsReadyOnceApplied(t *testing.T) {
	namespace := newNamespace(t)
	fake := newFakeProviders()
	logs := startIdentityOperator(t, namespace, fake)
	ca := caPEM(t)
	const clientSecret = "s3cr3t-introspection-value"
	putSecret(t, namespace, "login-ca", map[string][]byte{"ca.crt": ca})
	putSecret(t, namespace, "introspection", map[string][]byte{"client-secret": []byte(clientSecret + "\n")})

	p := newProvider(t, namespace, "corp", func(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
		spec.Issuer.CertificateAuthority = &mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "login-ca", Key: "ca.crt"}}
		spec.ClaimMappings.Groups = &mcpv1alpha1.GroupsClaimMapping{Claim: "groups", Prefix: "oidc-group:"}
		spec.ClaimValidationRules = []mcpv1alpha1.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "email must be verified"}}
		spec.Advertise = true
		introspected(spec)
	})
	got := providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	for _, c := range []string{mcpv1alpha1.ConditionReconciling, mcpv1alpha1.ConditionStalled} {
		if s := conditionOf(got, c); s != "absent" {
			t.Errorf("%s is %s on a Ready provider, want absent", c, s)
		}
	}
	if s := testutil.KStatus(t, got); s != "Current" {
		t.Errorf("kstatus = %s, want Current", s)
	}

	cfg, _ := fake.last(p.Name)
	want := identity.ProviderConfig{
		Name: p.Name, Generation: got.Generation, Created: got.CreationTimestamp.Time,
		IssuerURL: "https://login.example.com", Audiences: []string{"https://mcp.example.com"}, CACertPEM: ca,
		UsernameClaim: "email", UsernamePrefix: "oidc:", GroupsClaim: "groups", GroupsPrefix: "oidc-group:",
		ValidationRules: []identity.ValidationRule{{Expression: "claims.email_verified == true", Message: "email must be verified"}},
		Advertise:       true,
		Introspection:   &identity.Introspection{ClientID: "switchboard-gateway", ClientSecret: clientSecret},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("applied config\n%+v\nwant\n%+v", cfg, want)
	}
	waitForEvent(t, p.Name, "IssuerReady")
	assertNoSecret(t, p.Name, clientSecret, logs)
}

func TestIdentityProviderReportsWhyItIsNotReady(t *testing.T) {
	namespace := newNamespace(t)
	fake := newFakeProviders()
	logs := startIdentityOperator(t, namespace, fake)
	putSecret(t, namespace, "not-a-ca", map[string][]byte{"ca.crt": []byte("hello")})

	t.Run("missing Secret", func(t *testing.T) {
		p := newProvider(t, namespace, "no-secret", introspected)
		got := providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound)
		if s := conditionOf(got, mcpv1alpha1.ConditionStalled); s != "True/"+mcpv1alpha1.ReasonSecretNotFound {
			t.Errorf("Stalled = %s", s)
		}
		if msg := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady).Message; !strings.Contains(msg, `"introspection"`) || !strings.Contains(msg, namespace) {
			t.Errorf("message %q does not name the Secret and its namespace", msg)
		}
		if _, n := fake.last(p.Name); n != 0 {
			t.Errorf("a provider without its Secret was applied %d times", n)
		}
		waitForEvent(t, p.Name, mcpv1alpha1.ReasonSecretNotFound)
	})

	t.Run("rule that does not compile", func(t *testing.T) {
		p := newProvider(t, namespace, "bad-rule", func(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
			spec.ClaimValidationRules = []mcpv1alpha1.ClaimValidationRule{
				{Expression: "claims.email_verified == true"},
				{Expression: "claims.email.endsWith('@example.com'"},
			}
		})
		got := providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidClaimValidationRule)
		if s := conditionOf(got, mcpv1alpha1.ConditionStalled); s != "True/"+mcpv1alpha1.ReasonInvalidClaimValidationRule {
			t.Errorf("Stalled = %s", s)
		}
		if msg := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady).Message; !strings.Contains(msg, "claimValidationRules[1]") {
			t.Errorf("message %q does not name the rule", msg)
		}
		waitForEvent(t, p.Name, mcpv1alpha1.ReasonInvalidClaimValidationRule)

		// Fixing the rule makes it Ready.
		got.Spec.ClaimValidationRules[1].Expression = "claims.email.endsWith('@example.com')"
		if err := k8sClient.Update(context.Background(), got); err != nil {
			t.Fatal(err)
		}
		providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	})

	t.Run("CA that is no certificate", func(t *testing.T) {
		p := newProvider(t, namespace, "bad-ca", func(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
			spec.Issuer.CertificateAuthority = &mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "not-a-ca", Key: "ca.crt"}}
		})
		providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidCertificateAuthority)
	})

	t.Run("issuer that cannot be reached, then can", func(t *testing.T) {
		const clientSecret = "hunter2-client-secret"
		putSecret(t, namespace, "introspection", map[string][]byte{"client-secret": []byte(clientSecret)})
		name := namespace + "-down"
		// An implementation that (wrongly) echoes the secret: the reconciler must not.
		fake.setFail(name, fmt.Errorf("fetching https://login.example.com/.well-known/openid-configuration with client secret %s: connection refused", clientSecret))
		p := newProvider(t, namespace, "down", introspected)
		got := providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonDiscoveryFailed)
		if s := conditionOf(got, mcpv1alpha1.ConditionReconciling); s != "True/"+mcpv1alpha1.ReasonDiscoveryFailed {
			t.Errorf("Reconciling = %s, want True: an unreachable issuer heals by itself", s)
		}
		if s := conditionOf(got, mcpv1alpha1.ConditionStalled); s != "absent" {
			t.Errorf("Stalled = %s, want absent", s)
		}
		if msg := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady).Message; !strings.Contains(msg, "connection refused") {
			t.Errorf("message %q does not say what failed", msg)
		}
		waitForEvent(t, p.Name, mcpv1alpha1.ReasonDiscoveryFailed)
		// It is retried with backoff, not given up on.
		testutil.Eventually(t, 10*time.Second, "retries", func() error {
			if _, n := fake.last(p.Name); n < 3 {
				return fmt.Errorf("%d attempts", n)
			}
			return nil
		})
		assertNoSecret(t, p.Name, clientSecret, logs)

		fake.setFail(name, nil)
		providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
		waitForEvent(t, p.Name, "Recovered")
	})
}

func TestIdentityProviderFollowsItsSecrets(t *testing.T) {
	namespace := newNamespace(t)
	fake := newFakeProviders()
	logs := startIdentityOperator(t, namespace, fake)

	// Created before its Secret: it waits, and the Secret's creation brings it up.
	p := newProvider(t, namespace, "rotating", introspected)
	providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound)
	putSecret(t, namespace, "introspection", map[string][]byte{"client-secret": []byte("first-secret-value")})
	providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)

	// A rotated secret is applied.
	putSecret(t, namespace, "introspection", map[string][]byte{"client-secret": []byte("second-secret-value")})
	testutil.Eventually(t, 20*time.Second, "the rotated secret applied", func() error {
		cfg, _ := fake.last(p.Name)
		if cfg.Introspection == nil || cfg.Introspection.ClientSecret != "second-secret-value" {
			return errors.New("the old secret is still applied")
		}
		return nil
	})

	// A Secret of the same name in another namespace is not the provider's.
	other := newNamespace(t)
	putSecret(t, other, "introspection", map[string][]byte{"client-secret": []byte("someone-elses")})
	time.Sleep(500 * time.Millisecond) // nothing to wait for: the absence of an apply
	if cfg, _ := fake.last(p.Name); cfg.Introspection.ClientSecret != "second-secret-value" {
		t.Errorf("a Secret in namespace %s was applied to the provider", other)
	}

	// The Secret deleted: the provider is forgotten, so no token passes under a client
	// it no longer has, and says why.
	forgets := fake.forgets(p.Name)
	if err := k8sClient.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "introspection"}}); err != nil {
		t.Fatal(err)
	}
	providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound)
	if fake.forgets(p.Name) <= forgets {
		t.Errorf("a provider whose Secret is gone was not forgotten")
	}
	for _, v := range []string{"first-secret-value", "second-secret-value"} {
		assertNoSecret(t, p.Name, v, logs)
	}
}

func TestIdentityProviderDeletedIsForgotten(t *testing.T) {
	namespace := newNamespace(t)
	fake := newFakeProviders()
	startIdentityOperator(t, namespace, fake)
	p := newProvider(t, namespace, "gone", nil)
	providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	if n := fake.forgets(p.Name); n != 0 {
		t.Fatalf("a Ready provider was forgotten %d times", n)
	}
	if err := k8sClient.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "provider forgotten", func() error {
		if fake.forgets(p.Name) == 0 {
			return errors.New("not forgotten")
		}
		return nil
	})
}

func TestIdentityProviderIsAppliedAgainPeriodically(t *testing.T) {
	namespace := newNamespace(t)
	fake := newFakeProviders()
	startIdentityOperator(t, namespace, fake, func(r *controllers.MCPIdentityProviderReconciler) {
		r.ResyncInterval = 100 * time.Millisecond
	})
	p := newProvider(t, namespace, "resync", nil)
	providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	// Nothing changes, yet the key set is fetched again: that is how rotated keys and an
	// issuer outage reach the status.
	testutil.Eventually(t, 20*time.Second, "applied again", func() error {
		if _, n := fake.last(p.Name); n < 3 {
			return fmt.Errorf("applied %d times", n)
		}
		return nil
	})
	// An outage shows, and so does the recovery.
	fake.setFail(p.Name, errors.New("fetching the key set of https://login.example.com: 503 Service Unavailable"))
	providerReady(t, p.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonDiscoveryFailed)
	fake.setFail(p.Name, nil)
	providerReady(t, p.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
}
