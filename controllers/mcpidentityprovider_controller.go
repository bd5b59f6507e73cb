package controllers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/identity"
)

// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpidentityproviders,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpidentityproviders/status,verbs=patch

// IdentityProviders holds the configurations of the MCPIdentityProviders that token
// verification uses. The MCPIdentityProvider reconciler is its only writer.
type IdentityProviders interface {
	// Apply makes cfg the provider's configuration: it fetches the issuer's discovery
	// document and key set, and returns an error a person can act on when it cannot.
	Apply(ctx context.Context, cfg identity.ProviderConfig) error
	// Forget removes the provider.
	Forget(name string)
}

// Defaults of the MCPIdentityProvider reconciler.
const (
	// DefaultIdentityProviderResync is how often a Ready provider is applied again, so
	// that rotated keys and an issuer outage show in its status.
	DefaultIdentityProviderResync = 5 * time.Minute
	// DefaultIdentityProviderApplyTimeout bounds one Apply (discovery and key set).
	DefaultIdentityProviderApplyTimeout = 30 * time.Second
	// defaultProviderRetryBase and defaultProviderRetryMax bound the backoff between
	// attempts on an issuer that cannot be reached.
	defaultProviderRetryBase = 5 * time.Second
	defaultProviderRetryMax  = 5 * time.Minute
)

// providerSecretRefsIndex indexes MCPIdentityProviders by the names of the Secrets they
// reference, so a changed Secret wakes exactly the providers that use it.
const providerSecretRefsIndex = ".spec.providerSecretRefs" //nolint:gosec // an index name, not a credential

// Event reasons of an MCPIdentityProvider; failures use the Ready condition's reason.
const (
	eventIssuerReady = "IssuerReady"
)

// MCPIdentityProviderReconciler turns each MCPIdentityProvider into an
// identity.ProviderConfig, with its Secrets read from the cluster resource namespace, and
// hands it to Providers; Ready says whether the issuer's discovery document and key set
// could be fetched.
//
// Every replica runs it, because every replica's gateway verifies tokens; only the
// elected one writes status and Events. A provider whose spec or Secrets cannot be
// turned into a config is forgotten, so no token is accepted under a configuration the
// spec no longer says.
type MCPIdentityProviderReconciler struct {
	// Client reads providers (cluster-scoped) and Secret metadata from the manager's
	// cache and patches status.
	Client client.Client
	// SecretReader reads Secret values from the API server; the cache holds Secret
	// metadata only.
	SecretReader client.Reader
	// Namespace is the cluster resource namespace, where the Secrets of providers live
	// (--cluster-resource-namespace). Empty, no provider can reference a Secret.
	Namespace string
	// Providers receives the configurations.
	Providers IdentityProviders
	// Recorder records Events on transitions.
	Recorder recorder.EventRecorder
	// Elected is closed once this replica may write status and Events (the manager's
	// Elected()); nil means at once.
	Elected <-chan struct{}

	// ResyncInterval is how often a Ready provider is applied again; zero means
	// DefaultIdentityProviderResync.
	ResyncInterval time.Duration
	// ApplyTimeout bounds one Apply; zero means DefaultIdentityProviderApplyTimeout.
	ApplyTimeout time.Duration
	// RetryBaseDelay and RetryMaxDelay bound the exponential backoff between attempts
	// that failed; zero means 5s and 5m.
	RetryBaseDelay, RetryMaxDelay time.Duration
}

// Reconcile applies one provider's configuration and reports the outcome in its status.
// A provider that is gone is forgotten.
func (r *MCPIdentityProviderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	obj := &mcpv1alpha1.MCPIdentityProvider{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			ctrl.LoggerFrom(ctx).V(1).Info("Identity provider deleted; forgetting it")
			r.Providers.Forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !obj.DeletionTimestamp.IsZero() {
		r.Providers.Forget(obj.Name)
		return ctrl.Result{}, nil
	}

	before := obj.DeepCopy()
	obs := &providerObservation{}
	if err := r.checkConflicts(ctx, obj, obs); err != nil {
		return ctrl.Result{}, err
	}
	var cfg *identity.ProviderConfig
	if obs.conflict == nil {
		var err error
		if cfg, err = r.providerConfig(ctx, obj, obs); err != nil {
			// The API server could not be asked: nothing was observed, the status stays.
			return ctrl.Result{}, err
		}
	}
	if cfg == nil {
		// An older provider claims what this one does, or the spec or its Secrets say
		// something that cannot be applied: accept no token under the configuration
		// applied before.
		r.Providers.Forget(obj.Name)
	} else {
		r.apply(ctx, cfg, obs)
	}
	computeProviderStatus(obj, obs)

	if r.elected() {
		if !equality.Semantic.DeepEqual(before.Status, obj.Status) {
			stale, perr := patchStatus(ctx, r.Client, obj, before)
			if perr != nil {
				return ctrl.Result{}, fmt.Errorf("patching status: %w", perr)
			}
			if stale {
				// The transition is recorded by the run that writes it.
				return ctrl.Result{RequeueAfter: staleStatusRetry}, nil
			}
		}
		r.recordProviderTransition(before, obj)
	}

	switch {
	case obs.applied:
		return ctrl.Result{RequeueAfter: r.resyncInterval()}, nil
	case obs.conflict != nil && obs.conflict.transient:
		// Providers still holds an older provider this replica's cache no longer shows
		// (deleted, its own reconcile not yet run): try again shortly.
		return ctrl.Result{}, fmt.Errorf("applying identity provider: %s", obs.conflict.message)
	case obs.conflict != nil:
		// The older provider's change or deletion brings this one back (see
		// SetupWithManager).
		return ctrl.Result{}, nil
	case obs.invalidRule != "":
		return ctrl.Result{}, reconcile.TerminalError(errors.New(obs.invalidRule))
	case obs.discoveryFailure != "" && obs.discoveryPermanent:
		// A person has to fix the issuer; look again at the resync interval.
		return ctrl.Result{RequeueAfter: r.resyncInterval()}, nil
	case obs.discoveryFailure != "":
		// The rate limiter backs off, from RetryBaseDelay to RetryMaxDelay.
		return ctrl.Result{}, fmt.Errorf("applying identity provider: %s", obs.discoveryFailure)
	}
	// A missing Secret or an unusable CA: the Secret watch brings the provider back.
	return ctrl.Result{}, nil
}

// checkConflicts decides, from every MCPIdentityProvider in the cache, whether an older
// provider claims the issuer, a name prefix or the opaque tokens obj claims
// (identity.Conflicts), and records it in obs. Every replica decides from the same
// objects, so all of them apply the same providers. Providers being deleted claim
// nothing.
func (r *MCPIdentityProviderReconciler) checkConflicts(ctx context.Context, obj *mcpv1alpha1.MCPIdentityProvider, obs *providerObservation) error {
	var list mcpv1alpha1.MCPIdentityProviderList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("listing identity providers: %w", err)
	}
	claims := []identity.Claim{providerClaim(obj)}
	for i := range list.Items {
		if other := &list.Items[i]; other.Name != obj.Name && other.DeletionTimestamp.IsZero() {
			claims = append(claims, providerClaim(other))
		}
	}
	if c, ok := identity.Conflicts(claims)[obj.Name]; ok {
		obs.conflict = &providerConflict{reason: conflictReason(c.Reason), message: capitalize(c.Message)}
	}
	return nil
}

// providerClaim is what obj claims as its own.
func providerClaim(obj *mcpv1alpha1.MCPIdentityProvider) identity.Claim {
	spec := &obj.Spec
	c := identity.Claim{
		Name:           obj.Name,
		Created:        obj.CreationTimestamp.Time,
		IssuerURL:      spec.Issuer.URL,
		UsernamePrefix: spec.ClaimMappings.Username.Prefix,
	}
	if g := spec.ClaimMappings.Groups; g != nil {
		c.MapsGroups, c.GroupsPrefix = true, g.Prefix
	}
	if in := spec.Introspection; in != nil {
		c.Introspects, c.TokenPrefix = true, in.TokenPrefix
	}
	return c
}

// conflictReason is the Ready reason of a conflict identity decided on; "" for a reason
// that is no conflict.
func conflictReason(reason identity.Reason) string {
	switch reason {
	case identity.ReasonIssuerConflict:
		return mcpv1alpha1.ReasonIssuerConflict
	case identity.ReasonPrefixConflict:
		return mcpv1alpha1.ReasonPrefixConflict
	case identity.ReasonTokenPrefixConflict:
		return mcpv1alpha1.ReasonTokenPrefixConflict
	}
	return ""
}

// providerConfig builds the provider's identity.ProviderConfig, or records in obs why it
// cannot (an invalid rule, a missing Secret, an unusable CA) and returns nil. An error is
// a failure to read from the API server.
func (r *MCPIdentityProviderReconciler) providerConfig(ctx context.Context, obj *mcpv1alpha1.MCPIdentityProvider, obs *providerObservation) (*identity.ProviderConfig, error) {
	spec := &obj.Spec
	if msg := checkClaimValidationRules(spec.ClaimValidationRules); msg != "" {
		obs.invalidRule = msg
		return nil, nil
	}
	cfg := &identity.ProviderConfig{
		Name:              obj.Name,
		Generation:        obj.Generation,
		Created:           obj.CreationTimestamp.Time,
		IssuerURL:         spec.Issuer.URL,
		DiscoveryURL:      spec.Issuer.DiscoveryURL,
		Audiences:         slices.Clone(spec.Issuer.Audiences),
		AllowInsecureHTTP: spec.Issuer.AllowInsecureHTTP,
		UsernameClaim:     spec.ClaimMappings.Username.Claim,
		UsernamePrefix:    spec.ClaimMappings.Username.Prefix,
		Advertise:         spec.Advertise,
	}
	if g := spec.ClaimMappings.Groups; g != nil {
		cfg.GroupsClaim, cfg.GroupsPrefix = g.Claim, g.Prefix
	}
	for _, rule := range spec.ClaimValidationRules {
		cfg.ValidationRules = append(cfg.ValidationRules, identity.ValidationRule{Expression: rule.Expression, Message: rule.Message})
	}

	secrets := &secretResolver{reader: r.SecretReader, namespace: r.Namespace}
	if ca := spec.Issuer.CertificateAuthority; ca != nil {
		data, err := r.secretValue(ctx, secrets, ca.SecretKeyRef, obs)
		if err != nil || data == nil {
			return nil, err
		}
		if !x509.NewCertPool().AppendCertsFromPEM(data) {
			obs.invalidCA = fmt.Sprintf("Secret %q key %q in namespace %s holds no PEM-encoded certificate", ca.SecretKeyRef.Name, ca.SecretKeyRef.Key, r.Namespace)
			return nil, nil
		}
		cfg.CACertPEM = data
	}
	if in := spec.Introspection; in != nil {
		data, err := r.secretValue(ctx, secrets, in.ClientSecret.SecretKeyRef, obs)
		if err != nil || data == nil {
			return nil, err
		}
		// Secrets made from files often end in a newline, which is no part of a secret.
		cfg.Introspection = &identity.Introspection{ClientID: in.ClientID, ClientSecret: strings.TrimSpace(string(data)), TokenPrefix: in.TokenPrefix}
	}
	return cfg, nil
}

// secretValue reads one key of a Secret in the cluster resource namespace. A missing
// Secret or key is recorded in obs and returns nil data and no error.
func (r *MCPIdentityProviderReconciler) secretValue(ctx context.Context, secrets *secretResolver, ref mcpv1alpha1.ClusterSecretKeyReference, obs *providerObservation) ([]byte, error) {
	if r.Namespace == "" {
		obs.missingSecret = fmt.Errorf("secret %q cannot be read: the manager has no cluster resource namespace; set --cluster-resource-namespace or $POD_NAMESPACE", ref.Name)
		return nil, nil
	}
	data, err := secrets.value(ctx, mcpv1alpha1.SecretKeyReference(ref))
	var missing *missingSecretError
	if errors.As(err, &missing) {
		obs.missingSecret = fmt.Errorf("%w in namespace %s", missing, r.Namespace)
		return nil, nil
	}
	return data, err
}

// apply hands cfg to Providers within ApplyTimeout and records the outcome in obs. The
// error's message is recorded with the client secret redacted, should an implementation
// ever echo it.
func (r *MCPIdentityProviderReconciler) apply(ctx context.Context, cfg *identity.ProviderConfig, obs *providerObservation) {
	timeout := r.ApplyTimeout
	if timeout <= 0 {
		timeout = DefaultIdentityProviderApplyTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := r.Providers.Apply(ctx, *cfg)
	if err == nil {
		obs.applied = true
		return
	}
	msg := err.Error()
	if cfg.Introspection != nil && cfg.Introspection.ClientSecret != "" {
		msg = strings.ReplaceAll(msg, cfg.Introspection.ClientSecret, "[redacted]")
	}
	if msg == "" {
		msg = "the identity provider could not be applied"
	}
	var applyErr *identity.ApplyError
	if errors.As(err, &applyErr) && conflictReason(applyErr.Reason) != "" {
		obs.conflict = &providerConflict{reason: conflictReason(applyErr.Reason), message: capitalize(msg), transient: !isPermanent(err)}
		return
	}
	obs.discoveryFailure = msg
	obs.discoveryPermanent = isPermanent(err)
}

// claimsEnv is the CEL environment claim validation rules compile in: one variable,
// claims, a map of the token's claims.
var claimsEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(cel.Variable("claims", cel.MapType(cel.StringType, cel.DynType)))
})

// checkClaimValidationRules compiles every rule and returns, for the first that does not
// compile or does not evaluate to a bool, a message that names it by index; "" when all
// compile.
func checkClaimValidationRules(rules []mcpv1alpha1.ClaimValidationRule) string {
	if len(rules) == 0 {
		return ""
	}
	env, err := claimsEnv()
	if err != nil {
		return fmt.Sprintf("The CEL environment for claim validation rules cannot be built: %v", err)
	}
	for i, rule := range rules {
		ast, issues := env.Compile(rule.Expression)
		if issues != nil && issues.Err() != nil {
			return fmt.Sprintf("claimValidationRules[%d] does not compile: %v", i, issues.Err())
		}
		if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
			return fmt.Sprintf("claimValidationRules[%d] evaluates to %s, not bool", i, t)
		}
	}
	return ""
}

// recordProviderTransition emits an Event when Ready changes: Normal when it becomes
// True, Warning, with the condition's reason, when it becomes False for a new reason.
func (r *MCPIdentityProviderReconciler) recordProviderTransition(before, after *mcpv1alpha1.MCPIdentityProvider) {
	if r.Recorder == nil {
		return
	}
	was := meta.FindStatusCondition(before.Status.Conditions, mcpv1alpha1.ConditionReady)
	now := meta.FindStatusCondition(after.Status.Conditions, mcpv1alpha1.ConditionReady)
	switch {
	case now == nil:
	case now.Status == metav1.ConditionTrue && (was == nil || was.Status != metav1.ConditionTrue):
		if was != nil && was.Reason == mcpv1alpha1.ReasonDiscoveryFailed {
			r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, eventRecovered, "Discover", "Recovered: %s", now.Message)
			return
		}
		r.Recorder.Eventf(after, nil, corev1.EventTypeNormal, eventIssuerReady, "Discover", "%s", now.Message)
	case now.Status == metav1.ConditionFalse && now.Reason != mcpv1alpha1.ReasonProgressing &&
		(was == nil || was.Status != metav1.ConditionFalse || was.Reason != now.Reason):
		r.Recorder.Eventf(after, nil, corev1.EventTypeWarning, now.Reason, "Apply", "%s", now.Message)
	}
}

func (r *MCPIdentityProviderReconciler) elected() bool {
	if r.Elected == nil {
		return true
	}
	select {
	case <-r.Elected:
		return true
	default:
		return false
	}
}

func (r *MCPIdentityProviderReconciler) resyncInterval() time.Duration {
	if r.ResyncInterval > 0 {
		return r.ResyncInterval
	}
	return DefaultIdentityProviderResync
}

// SetupWithManager registers the reconciler, its Secret index and its watches: a
// provider's spec changing, and a Secret it references in the cluster resource namespace
// being created, changed or deleted. It runs on every replica.
func (r *MCPIdentityProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &mcpv1alpha1.MCPIdentityProvider{}, providerSecretRefsIndex,
		func(obj client.Object) []string { return providerSecrets(obj.(*mcpv1alpha1.MCPIdentityProvider)) },
	); err != nil {
		return err
	}
	base, maxDelay := r.RetryBaseDelay, r.RetryMaxDelay
	if base <= 0 {
		base = defaultProviderRetryBase
	}
	if maxDelay <= 0 {
		maxDelay = defaultProviderRetryMax
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&mcpv1alpha1.MCPIdentityProvider{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Whether a provider conflicts depends on every other: one created, changed or
		// deleted wakes them all, so a provider an older one kept out becomes Ready when
		// that one goes, without anyone touching it. Providers are few and admin-written.
		Watches(&mcpv1alpha1.MCPIdentityProvider{}, handler.EnqueueRequestsFromMapFunc(r.otherProviders),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Secret metadata only, as for MCPServers: a changed resourceVersion is all it
		// takes to know a Secret rotated.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.providersForSecret), builder.OnlyMetadata).
		WithOptions(controller.Options{
			NeedLeaderElection: ptr.To(false),
			RateLimiter:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, maxDelay),
		}).
		Complete(r)
}

// otherProviders returns every provider but changed.
func (r *MCPIdentityProviderReconciler) otherProviders(ctx context.Context, changed client.Object) []reconcile.Request {
	var list mcpv1alpha1.MCPIdentityProviderList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing identity providers to look at their conflicts again")
		return nil
	}
	requests := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Name != changed.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return requests
}

// providersForSecret returns the providers that reference the Secret, when it lives in
// the cluster resource namespace.
func (r *MCPIdentityProviderReconciler) providersForSecret(ctx context.Context, secret client.Object) []reconcile.Request {
	if r.Namespace == "" || secret.GetNamespace() != r.Namespace {
		return nil
	}
	var list mcpv1alpha1.MCPIdentityProviderList
	if err := r.Client.List(ctx, &list, client.MatchingFields{providerSecretRefsIndex: secret.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing identity providers that reference a Secret", "secret", secret.GetName())
		return nil
	}
	requests := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		requests[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return requests
}

// providerSecrets returns the names of the Secrets a provider references, sorted and
// without repeats.
func providerSecrets(obj *mcpv1alpha1.MCPIdentityProvider) []string {
	var names []string
	if ca := obj.Spec.Issuer.CertificateAuthority; ca != nil {
		names = append(names, ca.SecretKeyRef.Name)
	}
	if in := obj.Spec.Introspection; in != nil {
		names = append(names, in.ClientSecret.SecretKeyRef.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
