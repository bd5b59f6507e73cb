package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func providerCond(p *mcpv1alpha1.MCPIdentityProvider, condType string) string {
	c := meta.FindStatusCondition(p.Status.Conditions, condType)
	if c == nil {
		return absent
	}
	return string(c.Status) + "/" + c.Reason
}

func TestComputeProviderStatus(t *testing.T) {
	const (
		readyTrue       = "True/" + mcpv1alpha1.ReasonSucceeded
		discoveryFailed = "False/" + mcpv1alpha1.ReasonDiscoveryFailed
	)
	cases := []struct {
		name                      string
		obs                       providerObservation
		ready, reconciling, stall string
		kstatus                   status.Status
		message                   string
	}{
		{"applied", providerObservation{applied: true}, readyTrue, absent, absent, status.CurrentStatus, "https://login.example.com"},
		{"issuer unreachable heals by itself",
			providerObservation{discoveryFailure: "fetching discovery document of https://login.example.com: connection refused"},
			discoveryFailed, "True/" + mcpv1alpha1.ReasonDiscoveryFailed, absent, status.InProgressStatus, "Fetching discovery document"},
		{"issuer that names another issuer waits for a person",
			providerObservation{discoveryFailure: "discovery document names issuer https://other.example.com", discoveryPermanent: true},
			discoveryFailed, absent, "True/" + mcpv1alpha1.ReasonDiscoveryFailed, status.FailedStatus, "names issuer"},
		{"rule that does not compile",
			providerObservation{invalidRule: "claimValidationRules[0] does not compile: undeclared reference to 'claim'"},
			"False/" + mcpv1alpha1.ReasonInvalidClaimValidationRule, absent, "True/" + mcpv1alpha1.ReasonInvalidClaimValidationRule, status.FailedStatus, "claimValidationRules[0]"},
		{"missing Secret",
			providerObservation{missingSecret: fmt.Errorf("%w in namespace ops", &missingSecretError{secret: "ca"})},
			"False/" + mcpv1alpha1.ReasonSecretNotFound, absent, "True/" + mcpv1alpha1.ReasonSecretNotFound, status.FailedStatus, `Secret "ca" not found in namespace ops`},
		{"CA that is no certificate",
			providerObservation{invalidCA: `Secret "ca" key "ca.crt" in namespace ops holds no PEM-encoded certificate`},
			"False/" + mcpv1alpha1.ReasonInvalidCertificateAuthority, absent, "True/" + mcpv1alpha1.ReasonInvalidCertificateAuthority, status.FailedStatus, "no PEM-encoded certificate"},
		{"invalid rule comes before a missing Secret",
			providerObservation{invalidRule: "claimValidationRules[1] evaluates to string, not bool", missingSecret: errors.New("secret x")},
			"False/" + mcpv1alpha1.ReasonInvalidClaimValidationRule, absent, "True/" + mcpv1alpha1.ReasonInvalidClaimValidationRule, status.FailedStatus, "not bool"},
		{"an older provider has the prefix: waits for a person",
			providerObservation{conflict: &providerConflict{reason: mcpv1alpha1.ReasonPrefixConflict, message: `The username prefix "oidc:" overlaps the username prefix "oidc:" of identity provider corp-a, which is older`}},
			"False/" + mcpv1alpha1.ReasonPrefixConflict, absent, "True/" + mcpv1alpha1.ReasonPrefixConflict, status.FailedStatus, "identity provider corp-a"},
		{"an older applied provider on its way out heals by itself",
			providerObservation{conflict: &providerConflict{reason: mcpv1alpha1.ReasonIssuerConflict, message: "Identity provider corp-a, which is older, already has issuer https://login.example.com", transient: true}},
			"False/" + mcpv1alpha1.ReasonIssuerConflict, "True/" + mcpv1alpha1.ReasonIssuerConflict, absent, status.InProgressStatus, "corp-a"},
		{"a conflict comes before an invalid rule",
			providerObservation{conflict: &providerConflict{reason: mcpv1alpha1.ReasonTokenPrefixConflict, message: "Identity provider corp-a, which is older, already introspects"}, invalidRule: "claimValidationRules[0] does not compile"},
			"False/" + mcpv1alpha1.ReasonTokenPrefixConflict, absent, "True/" + mcpv1alpha1.ReasonTokenPrefixConflict, status.FailedStatus, "introspects"},
		{"nothing observed yet", providerObservation{},
			"False/" + mcpv1alpha1.ReasonProgressing, "True/" + mcpv1alpha1.ReasonProgressing, absent, status.InProgressStatus, "Fetching"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &mcpv1alpha1.MCPIdentityProvider{
				ObjectMeta: metav1.ObjectMeta{Name: "corp", Generation: 3},
				Spec:       mcpv1alpha1.MCPIdentityProviderSpec{Issuer: mcpv1alpha1.IdentityIssuer{URL: "https://login.example.com"}},
				// What the last reconcile left: a failure both Reconciling and Stalled
				// must not survive.
				Status: mcpv1alpha1.MCPIdentityProviderStatus{Conditions: []metav1.Condition{
					{Type: mcpv1alpha1.ConditionReconciling, Status: metav1.ConditionTrue, Reason: "Old"},
					{Type: mcpv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old"},
				}},
			}
			computeProviderStatus(p, &tc.obs)
			if got := providerCond(p, mcpv1alpha1.ConditionReady); got != tc.ready {
				t.Errorf("Ready = %s, want %s", got, tc.ready)
			}
			if got := providerCond(p, mcpv1alpha1.ConditionReconciling); got != tc.reconciling {
				t.Errorf("Reconciling = %s, want %s", got, tc.reconciling)
			}
			if got := providerCond(p, mcpv1alpha1.ConditionStalled); got != tc.stall {
				t.Errorf("Stalled = %s, want %s", got, tc.stall)
			}
			if p.Status.ObservedGeneration != 3 {
				t.Errorf("observedGeneration = %d, want 3", p.Status.ObservedGeneration)
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, mcpv1alpha1.ConditionReady); !strings.Contains(c.Message, tc.message) {
				t.Errorf("Ready message %q does not contain %q", c.Message, tc.message)
			}
			if got := testutil.KStatus(t, p); got != tc.kstatus {
				t.Errorf("kstatus = %s, want %s", got, tc.kstatus)
			}
		})
	}
}

func TestCheckClaimValidationRules(t *testing.T) {
	cases := []struct {
		rules []string
		want  string // fragment of the message; "" means valid
	}{
		{nil, ""},
		{[]string{"claims.email_verified == true"}, ""},
		{[]string{"claims.email.endsWith('@example.com')", "'admins' in claims.groups"}, ""},
		{[]string{"claims.email_verified"}, ""}, // dyn: checked when evaluated
		{[]string{"claims.email_verified ==", "true"}, "claimValidationRules[0] does not compile"},
		{[]string{"true", "claim.sub == 'x'"}, "claimValidationRules[1] does not compile"},
		{[]string{"claims.sub + 'x'"}, "evaluates to string, not bool"},
		{[]string{"'a string'"}, "claimValidationRules[0] evaluates to string, not bool"},
		{[]string{"size(claims)"}, "evaluates to int"},
	}
	for _, tc := range cases {
		rules := make([]mcpv1alpha1.ClaimValidationRule, len(tc.rules))
		for i, e := range tc.rules {
			rules[i].Expression = e
		}
		got := checkClaimValidationRules(rules)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("rules %q: got %q, want a message containing %q", tc.rules, got, tc.want)
		}
	}
}
