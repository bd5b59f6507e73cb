package main

import (
	"context"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// parseManagerFlags parses args as the manager subcommand would.
func parseManagerFlags(args ...string) (managerOptions, error) {
	var opts managerOptions
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts.bind(fs)
	return opts, fs.Parse(args)
}

func TestWatchNamespacesFlag(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{name: "unset watches every namespace", args: nil, want: nil},
		{name: "comma list with spaces and a trailing comma", args: []string{"--watch-namespaces", " team-a, team-b,"}, want: []string{"team-a", "team-b"}},
		{name: "repeated flag adds up", args: []string{"--watch-namespaces=team-a", "--watch-namespaces=team-b"}, want: []string{"team-a", "team-b"}},
		{name: "invalid namespace name", args: []string{"--watch-namespaces", "team-a,Team_B"}, wantErr: `namespace "Team_B"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parseManagerFlags(tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parsing %v: error %v, want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for ns := range opts.cacheOptions().DefaultNamespaces {
				got = append(got, ns)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("cache namespaces = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWatchNamespacesLimitsTheCache proves against a real API server that with
// --watch-namespaces the manager's cache (which the controllers and the catalogue read)
// holds the MCPServers of the listed namespaces only.
func TestWatchNamespacesLimitsTheCache(t *testing.T) {
	env, c := testenv.StartForTest(t)
	scheme := testenv.Scheme()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		server := &mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Name: "search", Namespace: ns},
			Spec: mcpv1alpha1.MCPServerSpec{
				HTTP: &mcpv1alpha1.HTTPServerSpec{URL: "https://mcp.example.com/mcp"},
			},
		}
		if err := c.Create(ctx, server); err != nil {
			t.Fatal(err)
		}
	}

	for _, tt := range []struct {
		args []string
		want []string
	}{
		{args: []string{"--watch-namespaces=team-a"}, want: []string{"team-a"}},
		{args: nil, want: []string{"team-a", "team-b"}},
	} {
		opts, err := parseManagerFlags(tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		cacheOpts := opts.cacheOptions()
		cacheOpts.Scheme = scheme
		informers, err := cache.New(env.Config, cacheOpts)
		if err != nil {
			t.Fatal(err)
		}
		cacheCtx, stop := context.WithCancel(ctx)
		go func() { _ = informers.Start(cacheCtx) }()
		if !informers.WaitForCacheSync(cacheCtx) {
			stop()
			t.Fatal("cache did not sync")
		}
		var servers mcpv1alpha1.MCPServerList
		err = informers.List(cacheCtx, &servers)
		stop()
		if err != nil {
			t.Fatalf("listing MCPServers with %v: %v", tt.args, err)
		}
		var got []string
		for _, s := range servers.Items {
			got = append(got, s.Namespace)
		}
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("with %v the cache holds MCPServers in %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestWatchNamespacesStillWatchSecretsOfClusterResources: with --watch-namespaces, the
// Secrets of MCPIdentityProviders (in the cluster resource namespace) are still watched,
// and only there besides the watched namespaces; nothing more is watched without the
// MCPIdentityProvider controller.
func TestWatchNamespacesStillWatchSecretsOfClusterResources(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		providers bool
		want      []string // namespaces of the Secret cache; nil: the default namespaces
	}{
		{name: "without providers", args: []string{"--watch-namespaces=team-a", "--operator-namespace=ops"}},
		{name: "manager's own namespace", args: []string{"--watch-namespaces=team-a", "--operator-namespace=ops"}, providers: true, want: []string{"ops", "team-a"}},
		{name: "flag wins", args: []string{"--watch-namespaces=team-a", "--operator-namespace=ops", "--cluster-resource-namespace=idp"}, providers: true, want: []string{"idp", "team-a"}},
		{name: "already watched", args: []string{"--watch-namespaces=team-a,ops", "--operator-namespace=ops"}, providers: true},
		{name: "every namespace watched", args: []string{"--operator-namespace=ops"}, providers: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parseManagerFlags(tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if tt.providers {
				opts.identityProviders = identity.NewProviders(identity.Options{})
			}
			var got []string
			for obj, byObject := range opts.cacheOptions().ByObject {
				if _, ok := obj.(*corev1.Secret); ok {
					for ns := range byObject.Namespaces {
						got = append(got, ns)
					}
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Secret cache namespaces = %v, want %v", got, tt.want)
			}
		})
	}
}
