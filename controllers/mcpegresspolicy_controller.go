package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpegresspolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpegresspolicies/status,verbs=patch

// MCPEgressPolicyReconciler reports whether each MCPEgressPolicy compiled and how many
// servers it selects. Enforcement is not its job: the MCPServer reconciler compiles the
// policies of a server's namespace on every reconcile and hands the result to the
// connector, and it watches policies itself, so a changed policy reaches the sessions
// without waiting for this reconciler.
type MCPEgressPolicyReconciler struct {
	// Client reads policies and servers from the manager's cache and patches status.
	Client client.Client
}

// Reconcile sets Accepted, selectedServers and observedGeneration on one policy.
func (r *MCPEgressPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	policy := &mcpv1alpha1.MCPEgressPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, policy); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := policy.DeepCopy()
	st := &policy.Status
	st.ObservedGeneration = policy.Generation

	accepted := metav1.Condition{
		Type:               mcpv1alpha1.ConditionAccepted,
		Status:             metav1.ConditionTrue,
		Reason:             mcpv1alpha1.ReasonSucceeded,
		Message:            "Policy compiled and enforced on every connection of the selected servers",
		ObservedGeneration: policy.Generation,
	}
	if err := egress.Validate(policy); err != nil {
		accepted.Status = metav1.ConditionFalse
		accepted.Reason = mcpv1alpha1.ReasonInvalidPolicy
		accepted.Message = connector.TruncateUTF8(fmt.Sprintf("Policy is invalid and allows nothing for the servers it selects: %v", err), maxMessageLength)
	}
	meta.SetStatusCondition(&st.Conditions, accepted)

	selected, err := r.countSelected(ctx, policy)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.SelectedServers = selected

	if equality.Semantic.DeepEqual(before.Status, policy.Status) {
		return ctrl.Result{}, nil
	}
	stale, err := patchStatus(ctx, r.Client, policy, before)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("patching status: %w", err)
	}
	if stale {
		return ctrl.Result{RequeueAfter: staleStatusRetry}, nil
	}
	return ctrl.Result{}, nil
}

// countSelected returns how many MCPServers in the policy's namespace it selects. An
// invalid selector selects every server, as enforcement does (fail closed).
func (r *MCPEgressPolicyReconciler) countSelected(ctx context.Context, policy *mcpv1alpha1.MCPEgressPolicy) (int32, error) {
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(policy.Namespace)); err != nil {
		return 0, fmt.Errorf("listing servers: %w", err)
	}
	selector, err := metav1.LabelSelectorAsSelector(&policy.Spec.ServerSelector)
	if err != nil {
		selector = labels.Everything()
	}
	var n int32
	for _, s := range servers.Items {
		if selector.Matches(labels.Set(s.Labels)) {
			n++
		}
	}
	return n, nil
}

// SetupWithManager registers the reconciler. A server's labels changing, or a server
// coming or going, re-counts the policies of its namespace.
func (r *MCPEgressPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mcpv1alpha1.MCPEgressPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mcpv1alpha1.MCPServer{}, handler.EnqueueRequestsFromMapFunc(r.policiesInNamespace),
			builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, createOrDelete()))).
		Complete(r)
}

// policiesInNamespace returns every policy in the object's namespace.
func (r *MCPEgressPolicyReconciler) policiesInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var policies mcpv1alpha1.MCPEgressPolicyList
	if err := r.Client.List(ctx, &policies, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing egress policies", "namespace", obj.GetNamespace())
		return nil
	}
	requests := make([]reconcile.Request, len(policies.Items))
	for i, p := range policies.Items {
		requests[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&p)}
	}
	return requests
}

// createOrDelete passes creations and deletions only.
func createOrDelete() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc:  func(_ event.UpdateEvent) bool { return false },
		GenericFunc: func(_ event.GenericEvent) bool { return false },
	}
}

// egressRules compiles the egress policies of the server's namespace and returns the
// rules that govern its connections.
func egressRules(ctx context.Context, c client.Reader, defaults egress.Defaults, obj *mcpv1alpha1.MCPServer) (*egress.ServerRules, error) {
	var policies mcpv1alpha1.MCPEgressPolicyList
	if err := c.List(ctx, &policies, client.InNamespace(obj.Namespace)); err != nil {
		return nil, fmt.Errorf("listing egress policies: %w", err)
	}
	// Invalid policies are reported on the policy itself by MCPEgressPolicyReconciler;
	// Compile keeps them in fail-closed form, so nothing is lost by ignoring the list.
	set, _ := egress.Compile(policies.Items, defaults)
	return set.ForServer(obj.Namespace, obj.Labels), nil
}
