package catalog

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// bigServer is a Ready MCPServer of namespace ns listing n resources and n prompts.
func bigServer(ns, name string, n int) *mcpv1alpha1.MCPServer {
	s := &mcpv1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}}
	s.Status.Conditions = []metav1.Condition{{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1}}
	for i := range n {
		s.Status.Resources = append(s.Status.Resources, mcpv1alpha1.ResourceInfo{URI: fmt.Sprintf("file:///%03d", i)})
		s.Status.Prompts = append(s.Status.Prompts, mcpv1alpha1.PromptInfo{Name: fmt.Sprintf("p%03d", i)})
	}
	return s
}

func TestToolsetFeaturesAreBounded(t *testing.T) {
	st := newToolsetStore()
	st.putServer(bigServer("ns", "big", 300))
	var servers []mcpv1alpha1.ToolsetServer
	for i := range 20 {
		name := fmt.Sprintf("s%02d", i)
		st.putServer(bigServer("ns", name, 256))
		servers = append(servers, mcpv1alpha1.ToolsetServer{Name: name})
	}
	st.putToolset(&mcpv1alpha1.MCPToolset{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "one"},
		Spec: mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "big"}}}})
	st.putToolset(&mcpv1alpha1.MCPToolset{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "many"},
		Spec: mcpv1alpha1.MCPToolsetSpec{Servers: servers}})

	one := st.items[serverKey{"ns", "one"}].summary
	if len(one.Resources) != 256 || len(one.Prompts) != 256 || one.ResourceCount != 300 || one.PromptCount != 300 ||
		!one.ResourcesTruncated || !one.PromptsTruncated {
		t.Fatalf("one toolset lists %d of %d resources (truncated %v), %d of %d prompts (truncated %v); want 256 of 300 each, truncated",
			len(one.Resources), one.ResourceCount, one.ResourcesTruncated, len(one.Prompts), one.PromptCount, one.PromptsTruncated)
	}

	// One answer lists at most maxListedFeatures entries in all; a toolset past the
	// budget says it lists fewer, with its counts whole.
	many := st.items[serverKey{"ns", "many"}].summary
	budget, listed := maxListedFeatures, 0
	for range 10 {
		got := many.withinBudget(&budget)
		listed += len(got.Resources) + len(got.ResourceTemplates) + len(got.Prompts)
		if got.ResourceCount != 20*256 || got.PromptCount != 20*256 {
			t.Errorf("counts %d, %d; want %d each", got.ResourceCount, got.PromptCount, 20*256)
		}
		if len(got.Resources) < 256 && !got.ResourcesTruncated || len(got.Prompts) < 256 && !got.PromptsTruncated {
			t.Errorf("a toolset cut by the budget does not say so: %d resources, %d prompts", len(got.Resources), len(got.Prompts))
		}
	}
	if listed != maxListedFeatures {
		t.Errorf("listed %d entries in one answer, want %d", listed, maxListedFeatures)
	}
	if len(many.Resources) != 256 {
		t.Errorf("the budget changed the stored summary: %d resources", len(many.Resources))
	}
}
