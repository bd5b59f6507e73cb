package controllers

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcptoolsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=mcp.switchboard.dev,resources=mcptoolsets/status,verbs=patch

// MCPToolsetReconciler publishes, in each MCPToolset's status, which servers it selects
// and which tools it exposes under which names. It computes everything from the
// MCPServers' own status (the connector keeps those current) and talks to no server:
// the gateway serves the toolset.
type MCPToolsetReconciler struct {
	// Client reads toolsets and servers from the manager's cache and patches status.
	Client client.Client
}

// Reconcile recomputes one toolset's status from the MCPServers of its namespace and
// patches it when it changed. An invalid selector is Stalled and terminal: only a new
// spec can fix it.
func (r *MCPToolsetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	ctx, span := startReconcile(ctx, "MCPToolset", tracing.Toolset, req)
	defer func() { endReconcile(span, res, err) }()
	return r.reconcile(ctx, req)
}

// reconcile is Reconcile inside its span.
func (r *MCPToolsetReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ts := &mcpv1alpha1.MCPToolset{}
	if err := r.Client.Get(ctx, req.NamespacedName, ts); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var servers mcpv1alpha1.MCPServerList
	if err := r.Client.List(ctx, &servers, client.InNamespace(ts.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("listing servers: %w", err)
	}
	before := ts.DeepCopy()
	obs := observeToolset(ts, servers.Items)
	computeToolsetStatus(ts, obs)

	if !equality.Semantic.DeepEqual(before.Status, ts.Status) {
		stale, err := patchStatus(ctx, r.Client, ts, before)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("patching status: %w", err)
		}
		if stale {
			return ctrl.Result{RequeueAfter: staleStatusRetry}, nil
		}
	}
	if obs.invalidSelector != "" {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("invalid server selector: %s", obs.invalidSelector))
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler. A change of a server that matters to a
// toolset (its labels, readiness, published tools, resources and prompts, existence) re-reconciles the toolsets
// of its namespace that select it or selected it.
func (r *MCPToolsetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&mcpv1alpha1.MCPToolset{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mcpv1alpha1.MCPServer{}, handler.EnqueueRequestsFromMapFunc(r.toolsetsForServer),
			builder.WithPredicates(serverChangedForToolsets{})).
		Complete(r)
}

// toolsetsForServer returns the toolsets of the server's namespace that select it now
// or listed it in their status (it may have stopped matching).
func (r *MCPToolsetReconciler) toolsetsForServer(ctx context.Context, obj client.Object) []reconcile.Request {
	server, ok := obj.(*mcpv1alpha1.MCPServer)
	if !ok {
		return nil
	}
	var list mcpv1alpha1.MCPToolsetList
	if err := r.Client.List(ctx, &list, client.InNamespace(server.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing toolsets", "namespace", server.Namespace)
		return nil
	}
	var requests []reconcile.Request
	for i := range list.Items {
		ts := &list.Items[i]
		listed := slices.ContainsFunc(ts.Status.Servers, func(s mcpv1alpha1.ToolsetServerStatus) bool { return s.Name == server.Name })
		if listed || toolsets.Selects(ts, server) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ts)})
		}
	}
	return requests
}

// serverChangedForToolsets passes creations, deletions and the updates of an MCPServer
// a toolset's status depends on: labels, suspension, readiness and published tools,
// resources and prompts. A
// healthy probe changes none of them, so it reconciles no toolset.
type serverChangedForToolsets struct {
	predicate.Funcs
}

// Update reports whether the update changed what a toolset's status depends on.
func (serverChangedForToolsets) Update(e event.UpdateEvent) bool {
	older, ok1 := e.ObjectOld.(*mcpv1alpha1.MCPServer)
	newer, ok2 := e.ObjectNew.(*mcpv1alpha1.MCPServer)
	if !ok1 || !ok2 {
		return true
	}
	return !equality.Semantic.DeepEqual(older.Labels, newer.Labels) ||
		older.Generation != newer.Generation ||
		toolsets.ServerReady(older) != toolsets.ServerReady(newer) ||
		readyReason(older) != readyReason(newer) ||
		older.Status.ToolsDigest != newer.Status.ToolsDigest ||
		!equality.Semantic.DeepEqual(older.Status.Tools, newer.Status.Tools) ||
		!equality.Semantic.DeepEqual(older.Status.Resources, newer.Status.Resources) ||
		!equality.Semantic.DeepEqual(older.Status.Prompts, newer.Status.Prompts)
}

func readyReason(obj *mcpv1alpha1.MCPServer) string {
	if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}
