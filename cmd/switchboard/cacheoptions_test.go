package main

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestCacheKeepsNoManagedFields: the manager's cache, which holds every MCPServer for
// as long as it lives, keeps no managedFields, while the API server still has them.
func TestCacheKeepsNoManagedFields(t *testing.T) {
	env, c := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "search", Namespace: "default"},
		Spec: mcpv1alpha1.MCPServerSpec{
			HTTP: &mcpv1alpha1.HTTPServerSpec{URL: "https://mcp.example.com/mcp"},
		},
	}
	if err := c.Create(ctx, server); err != nil {
		t.Fatal(err)
	}
	var direct mcpv1alpha1.MCPServer
	if err := c.Get(ctx, client.ObjectKeyFromObject(server), &direct); err != nil {
		t.Fatal(err)
	}
	if len(direct.ManagedFields) == 0 {
		t.Fatal("the API server returned the MCPServer without managedFields; the test proves nothing")
	}

	opts, err := parseManagerFlags()
	if err != nil {
		t.Fatal(err)
	}
	cacheOpts := opts.cacheOptions()
	cacheOpts.Scheme = testenv.Scheme()
	informers, err := cache.New(env.Config, cacheOpts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	var cached mcpv1alpha1.MCPServer
	if err := informers.Get(ctx, client.ObjectKeyFromObject(server), &cached); err != nil {
		t.Fatal(err)
	}
	if len(cached.ManagedFields) != 0 {
		t.Errorf("the cache holds %d managedFields entries for the MCPServer; want none", len(cached.ManagedFields))
	}
}

// TestCacheHoldsOnlyTheOperatorsPods: the manager watches the pods and ReplicaSets of
// stdio servers, and its cache holds those the operator's Deployments made (they carry
// its managed-by label), not every pod and ReplicaSet of the cluster.
func TestCacheHoldsOnlyTheOperatorsPods(t *testing.T) {
	env, c := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range []struct {
		name   string
		labels map[string]string
	}{
		{"theirs", map[string]string{"app": "web"}},
		{"ours", map[string]string{controllers.ManagedByLabel: controllers.ManagedByValue}},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: p.labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/c:1"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		selector := map[string]string{"pod": p.name}
		rs := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default", Labels: p.labels},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: selector},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: selector}, Spec: pod.Spec},
			},
		}
		if err := c.Create(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}

	opts, err := parseManagerFlags()
	if err != nil {
		t.Fatal(err)
	}
	cacheOpts := opts.cacheOptions()
	cacheOpts.Scheme = testenv.Scheme()
	informers, err := cache.New(env.Config, cacheOpts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	if !informers.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	var pods corev1.PodList
	if err := informers.List(ctx, &pods); err != nil {
		t.Fatal(err)
	}
	var replicaSets appsv1.ReplicaSetList
	if err := informers.List(ctx, &replicaSets); err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][]string{"pods": podNames(pods.Items), "ReplicaSets": rsNames(replicaSets.Items)} {
		if len(got) != 1 || got[0] != "ours" {
			t.Errorf("the cache holds the %s %v, want only ours", what, got)
		}
	}
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	return out
}

func rsNames(replicaSets []appsv1.ReplicaSet) []string {
	var out []string
	for _, rs := range replicaSets {
		out = append(out, rs.Name)
	}
	return out
}
