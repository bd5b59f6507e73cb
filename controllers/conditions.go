package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
)

// The conditions every kind's status ends with, written the same way for all of them:
// Ready says whether the object does its job; Reconciling and Stalled, present only
// while True (kstatus's abnormal-true conditions), say whether what keeps it from
// doing so heals by itself or waits for a person. Every condition carries the
// generation it was computed for and a message of at most maxMessageLength bytes.

// progress is what kstatus should make of an object that is not Ready, or of a Ready
// one whose current generation is not yet what serves.
type progress int

const (
	// progressIdle means nothing is being worked on and nothing is wrong.
	progressIdle progress = iota
	// progressReconciling means the failure heals by itself: Reconciling=True.
	progressReconciling
	// progressStalled means a person has to change something: Stalled=True.
	progressStalled
)

// conditionState is a condition's status, reason and message; nil means the condition
// is absent.
type conditionState struct {
	status          metav1.ConditionStatus
	reason, message string
}

// setConditionState sets the condition condType of conditions to c for generation, or
// removes it when c is nil.
func setConditionState(conditions *[]metav1.Condition, generation int64, condType string, c *conditionState) {
	if c == nil {
		meta.RemoveStatusCondition(conditions, condType)
		return
	}
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type:               condType,
		Status:             c.status,
		Reason:             c.reason,
		Message:            connector.TruncateUTF8(c.message, maxMessageLength),
		ObservedGeneration: generation,
	})
}

// summary is what an object's status says about it as a whole.
type summary struct {
	// ready is the Ready condition.
	ready conditionState
	// progress, with reason and message, sets Reconciling or Stalled; progressIdle
	// removes both.
	progress        progress
	reason, message string
}

// setSummary writes Ready, Reconciling and Stalled from s.
func setSummary(conditions *[]metav1.Condition, generation int64, s summary) {
	setConditionState(conditions, generation, mcpv1alpha1.ConditionReady, &s.ready)
	var reconciling, stalled *conditionState
	switch s.progress {
	case progressReconciling:
		reconciling = &conditionState{metav1.ConditionTrue, s.reason, s.message}
	case progressStalled:
		stalled = &conditionState{metav1.ConditionTrue, s.reason, s.message}
	}
	setConditionState(conditions, generation, mcpv1alpha1.ConditionReconciling, reconciling)
	setConditionState(conditions, generation, mcpv1alpha1.ConditionStalled, stalled)
}

// notReadySummary is the summary of an object that is not Ready for reason, which heals
// as p says.
func notReadySummary(p progress, reason, message string) summary {
	return summary{ready: conditionState{metav1.ConditionFalse, reason, message}, progress: p, reason: reason, message: message}
}
