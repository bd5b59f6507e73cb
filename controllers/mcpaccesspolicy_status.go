package controllers

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

// maxAccessPolicyTargets bounds status.targets of an MCPAccessPolicy.
const maxAccessPolicyTargets = 64

// accessPolicyObservation is what one reconcile of an MCPAccessPolicy observed: whether
// it compiled and which existing servers and toolsets it selects.
type accessPolicyObservation struct {
	// compileErr is why the policy did not compile; nil when it did.
	compileErr error
	// targets are the selected MCPServers and MCPToolsets, sorted by kind and name.
	targets []mcpv1alpha1.AccessPolicyTargetStatus
}

// computeAccessPolicyStatus sets every status field and condition the access policy
// reconciler owns from what was observed. It is a pure function of its arguments.
//
// Ready is True once the policy compiled; False with reason InvalidExpression (a `when`
// that cannot be used) or InvalidSpec (a targetSelector that cannot be parsed) otherwise,
// and then Stalled too: only a new spec fixes it. The policy never waits on anything, so
// Reconciling is never set.
func computeAccessPolicyStatus(p *mcpv1alpha1.MCPAccessPolicy, obs *accessPolicyObservation) {
	st := &p.Status
	st.ObservedGeneration = p.Generation
	st.TargetCount = int32(len(obs.targets)) //nolint:gosec // bounded by the objects of one namespace
	st.Targets = obs.targets[:min(len(obs.targets), maxAccessPolicyTargets)]
	if len(st.Targets) == 0 {
		st.Targets = nil
	}

	ready := accessPolicyReadyCondition(p, obs)
	s := summary{ready: conditionState{ready.Status, ready.Reason, ready.Message}}
	if ready.Status != metav1.ConditionTrue {
		s.progress, s.reason, s.message = progressStalled, ready.Reason, ready.Message
	}
	setSummary(&st.Conditions, p.Generation, s)
}

// accessPolicyReadyCondition is the summary: True when the policy compiled.
func accessPolicyReadyCondition(p *mcpv1alpha1.MCPAccessPolicy, obs *accessPolicyObservation) *metav1.Condition {
	c := &metav1.Condition{Type: mcpv1alpha1.ConditionReady}
	var exprErr *policy.ExpressionError
	switch {
	case obs.compileErr != nil && errors.As(obs.compileErr, &exprErr):
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidExpression
		c.Message = fmt.Sprintf("Policy is invalid and denies every request to the targets it selects: %v", obs.compileErr)
	case obs.compileErr != nil:
		c.Status, c.Reason = metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidSpec
		c.Message = fmt.Sprintf("Policy is invalid and denies every request to the targets it selects: %v", obs.compileErr)
	default:
		verb := "Enforcing"
		if p.Spec.Enforcement == mcpv1alpha1.AccessPolicyAudit {
			verb = "Auditing"
		}
		c.Status, c.Reason = metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded
		c.Message = fmt.Sprintf("%s %d rules on %d targets", verb, len(p.Spec.Rules), len(obs.targets))
	}
	return c
}
