package main

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
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
