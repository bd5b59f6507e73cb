package controllers

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// providerObservation is what one reconcile saw of an MCPIdentityProvider: the first
// thing that kept it from being applied, or that it was applied. Exactly one of the
// fields that say so is set once the reconcile has looked.
type providerObservation struct {
	// conflict says which older provider claims what this one claims; the provider is
	// then not applied.
	conflict *providerConflict
	// invalidRule says which claim validation rule does not compile, and why.
	invalidRule string
	// missingSecret says which Secret or key the spec references but is not there.
	missingSecret error
	// invalidCA says why the certificateAuthority Secret key is unusable.
	invalidCA string
	// discoveryFailure is Apply's error message, with every secret value redacted: the
	// discovery document or key set could not be had. discoveryPermanent says no retry
	// heals it.
	discoveryFailure   string
	discoveryPermanent bool
	// applied is true once Apply succeeded with this generation's config.
	applied bool
}

// providerConflict is why an older provider keeps this one out: reason is
// IssuerConflict, PrefixConflict or TokenPrefixConflict, message names the older provider.
// transient is set when the conflict was found among the applied providers rather than
// among those that exist: the older one is on its way out.
type providerConflict struct {
	reason, message string
	transient       bool
}

// isPermanent reports whether err says of itself that no retry heals it.
func isPermanent(err error) bool {
	var perm permanentError
	return errors.As(err, &perm) && perm.Permanent()
}

// permanentError is what an IdentityProviders implementation may return from Apply for
// a failure no retry heals (the issuer's discovery document names another issuer, say):
// the provider is then Stalled instead of Reconciling. Whether a failure heals is
// decided where the error is made.
type permanentError interface {
	Permanent() bool
}

// failure returns the first thing in obs that keeps the provider from being Ready, and
// whether it heals by itself (Reconciling) or waits for a person (Stalled); nil when the
// provider was applied.
func (o *providerObservation) failure() *notReady {
	switch {
	case o.conflict != nil:
		p := progressStalled
		if o.conflict.transient {
			p = progressReconciling
		}
		return &notReady{o.conflict.reason, o.conflict.message, p}
	case o.invalidRule != "":
		return &notReady{mcpv1alpha1.ReasonInvalidClaimValidationRule, o.invalidRule, progressStalled}
	case o.missingSecret != nil:
		return &notReady{mcpv1alpha1.ReasonSecretNotFound, capitalize(o.missingSecret.Error()), progressStalled}
	case o.invalidCA != "":
		return &notReady{mcpv1alpha1.ReasonInvalidCertificateAuthority, o.invalidCA, progressStalled}
	case o.discoveryFailure != "":
		p := progressReconciling
		if o.discoveryPermanent {
			p = progressStalled
		}
		return &notReady{mcpv1alpha1.ReasonDiscoveryFailed, capitalize(o.discoveryFailure), p}
	case !o.applied:
		return &notReady{mcpv1alpha1.ReasonProgressing, "Fetching the issuer's discovery document and key set", progressReconciling}
	}
	return nil
}

// computeProviderStatus sets observedGeneration, Ready, Reconciling and Stalled of an
// MCPIdentityProvider from what the reconcile observed. It is a pure function; each
// condition is set, or removed, on every call. Messages are cut to 1 KiB.
func computeProviderStatus(obj *mcpv1alpha1.MCPIdentityProvider, obs *providerObservation) {
	obj.Status.ObservedGeneration = obj.Generation
	failed := obs.failure()
	if failed == nil {
		setSummary(&obj.Status.Conditions, obj.Generation, summary{ready: conditionState{metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded,
			fmt.Sprintf("Discovery document and key set of %s fetched; tokens it issues are accepted", obj.Spec.Issuer.URL)}})
		return
	}
	setSummary(&obj.Status.Conditions, obj.Generation, notReadySummary(failed.progress, failed.reason, failed.message))
}
