package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/policy"
)

func TestComputeAccessPolicyStatus(t *testing.T) {
	server := func(name string) mcpv1alpha1.AccessPolicyTargetStatus {
		return mcpv1alpha1.AccessPolicyTargetStatus{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: name}
	}
	many := make([]mcpv1alpha1.AccessPolicyTargetStatus, 70)
	for i := range many {
		many[i] = server(strings.Repeat("s", i+1))
	}
	cases := []struct {
		name         string
		enforcement  mcpv1alpha1.AccessPolicyEnforcement
		obs          accessPolicyObservation
		ready, stall string
		kstatus      status.Status
		message      string
		listed       int
	}{
		{"compiled", mcpv1alpha1.AccessPolicyEnforce, accessPolicyObservation{targets: many[:2]},
			"True/Succeeded", absent, status.CurrentStatus, "Enforcing 1 rules on 2 targets", 2},
		{"compiled in Audit mode, selecting nothing", mcpv1alpha1.AccessPolicyAudit, accessPolicyObservation{},
			"True/Succeeded", absent, status.CurrentStatus, "Auditing 1 rules on 0 targets", 0},
		{"more targets than status lists", mcpv1alpha1.AccessPolicyEnforce, accessPolicyObservation{targets: many},
			"True/Succeeded", absent, status.CurrentStatus, "on 70 targets", 64},
		{"a when that does not compile", mcpv1alpha1.AccessPolicyEnforce,
			accessPolicyObservation{compileErr: &policy.ExpressionError{Rule: 2, Problem: "does not compile: undeclared reference to 'request'"}, targets: many[:1]},
			"False/InvalidExpression", "True/InvalidExpression", status.FailedStatus, "spec.rules[2].when does not compile", 1},
		{"a selector that cannot be parsed", mcpv1alpha1.AccessPolicyEnforce,
			accessPolicyObservation{compileErr: errors.New(`spec.targetSelector is invalid: "Near" is not a valid label selector operator`)},
			"False/InvalidSpec", "True/InvalidSpec", status.FailedStatus, "denies every request to the targets it selects", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &mcpv1alpha1.MCPAccessPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 3}}
			p.Spec.Enforcement = tc.enforcement
			p.Spec.Rules = []mcpv1alpha1.AccessPolicyRule{{Action: mcpv1alpha1.AccessPolicyAllow}}
			// A stale Stalled from an earlier, broken generation is removed once it compiles.
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: mcpv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "InvalidExpression"})
			computeAccessPolicyStatus(p, &tc.obs)
			if got := conditionOf(p.Status.Conditions, mcpv1alpha1.ConditionReady); got != tc.ready {
				t.Errorf("Ready = %s, want %s", got, tc.ready)
			}
			if got := conditionOf(p.Status.Conditions, mcpv1alpha1.ConditionStalled); got != tc.stall {
				t.Errorf("Stalled = %s, want %s", got, tc.stall)
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, mcpv1alpha1.ConditionReady); c == nil || !strings.Contains(c.Message, tc.message) || c.ObservedGeneration != 3 {
				t.Errorf("Ready %+v, want a message saying %q at generation 3", c, tc.message)
			}
			if p.Status.ObservedGeneration != 3 || len(p.Status.Targets) != tc.listed || int(p.Status.TargetCount) != len(tc.obs.targets) {
				t.Errorf("observedGeneration %d, %d targets listed of %d, want 3, %d of %d", p.Status.ObservedGeneration, len(p.Status.Targets), p.Status.TargetCount, tc.listed, len(tc.obs.targets))
			}
			if got := testutil.KStatus(t, p); got != tc.kstatus {
				t.Errorf("kstatus = %s, want %s", got, tc.kstatus)
			}
		})
	}
}

// conditionOf is "Status/Reason" of the condition, or absent.
func conditionOf(conditions []metav1.Condition, condType string) string {
	c := meta.FindStatusCondition(conditions, condType)
	if c == nil {
		return absent
	}
	return string(c.Status) + "/" + c.Reason
}
