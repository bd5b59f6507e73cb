package controllers

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpaccesspolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpaccesspolicies/status,verbs=patch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcptoolsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcpservers,verbs=get;list;watch

// MCPAccessPolicyReconciler reports whether each MCPAccessPolicy compiled and which
// MCPServers and MCPToolsets it selects. Enforcement is not its job: the gateway compiles
// the policies of a target's namespace and asks policy.Decide on every request.
type MCPAccessPolicyReconciler struct {
	// Client reads policies, servers and toolsets from the manager's cache and patches
	// status.
	Client client.Client
}

// Reconcile compiles one policy, selects its targets among the MCPServers and
// MCPToolsets of its namespace, and patches its status when it changed. A policy that
// does not compile is Stalled and terminal: only a new spec can fix it.
func (r *MCPAccessPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &mcpv1alpha1.MCPAccessPolicy{}
	if err := r.Client.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	obs, err := r.observe(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := p.DeepCopy()
	computeAccessPolicyStatus(p, obs)
	if !equality.Semantic.DeepEqual(before.Status, p.Status) {
		stale, err := patchStatus(ctx, r.Client, p, before)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("patching status: %w", err)
		}
		if stale {
			return ctrl.Result{RequeueAfter: staleStatusRetry}, nil
		}
	}
	if obs.compileErr != nil {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("invalid access policy: %w", obs.compileErr))
	}
	return ctrl.Result{}, nil
}

// observe compiles the policy and lists the existing targets it selects, sorted by kind
// and name.
func (r *MCPAccessPolicyReconciler) observe(ctx context.Context, p *mcpv1alpha1.MCPAccessPolicy) (*accessPolicyObservation, error) {
	compiled, compileErr := policy.Compile(p)
	obs := &accessPolicyObservation{compileErr: compileErr}
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("listing servers: %w", err)
	}
	var toolsets mcpv1alpha1.MCPToolsetList
	if err := r.Client.List(ctx, &toolsets, client.InNamespace(p.Namespace)); err != nil {
		return nil, fmt.Errorf("listing toolsets: %w", err)
	}
	add := func(kind mcpv1alpha1.AccessPolicyTargetKind, obj client.Object) {
		t := policy.Target{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Labels: obj.GetLabels()}
		if compiled.Selects(t) {
			obs.targets = append(obs.targets, mcpv1alpha1.AccessPolicyTargetStatus{Kind: kind, Name: t.Name})
		}
	}
	for i := range servers.Items {
		add(mcpv1alpha1.AccessPolicyTargetMCPServer, &servers.Items[i])
	}
	for i := range toolsets.Items {
		add(mcpv1alpha1.AccessPolicyTargetMCPToolset, &toolsets.Items[i])
	}
	slices.SortFunc(obs.targets, func(a, b mcpv1alpha1.AccessPolicyTargetStatus) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
	})
	return obs, nil
}

// SetupWithManager registers the reconciler. An MCPServer or MCPToolset coming, going or
// changing its labels re-reconciles the policies of its namespace.
func (r *MCPAccessPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	changed := builder.WithPredicates(predicate.Or(predicate.LabelChangedPredicate{}, createOrDelete()))
	return ctrl.NewControllerManagedBy(mgr).
		For(&mcpv1alpha1.MCPAccessPolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mcpv1alpha1.MCPServer{}, handler.EnqueueRequestsFromMapFunc(r.policiesInNamespace), changed).
		Watches(&mcpv1alpha1.MCPToolset{}, handler.EnqueueRequestsFromMapFunc(r.policiesInNamespace), changed).
		Complete(r)
}

// policiesInNamespace returns every access policy in the object's namespace.
func (r *MCPAccessPolicyReconciler) policiesInNamespace(ctx context.Context, obj client.Object) []reconcile.Request {
	var policies mcpv1alpha1.MCPAccessPolicyList
	if err := r.Client.List(ctx, &policies, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing access policies", "namespace", obj.GetNamespace())
		return nil
	}
	requests := make([]reconcile.Request, len(policies.Items))
	for i := range policies.Items {
		requests[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&policies.Items[i])}
	}
	return requests
}
