package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// awaitAccessPolicy waits until cond holds of p as the API server has it.
func awaitAccessPolicy(t testing.TB, p *mcpv1alpha1.MCPAccessPolicy, what string, cond func(*mcpv1alpha1.MCPAccessPolicy) error) {
	t.Helper()
	testutil.Eventually(t, eventually, what, func() error {
		got := &mcpv1alpha1.MCPAccessPolicy{}
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		return cond(got)
	})
}

// targetsAre says which targets p lists when they are not want.
func targetsAre(p *mcpv1alpha1.MCPAccessPolicy, want ...string) error {
	if got := accessPolicyTargets(p); !slices.Equal(got, want) {
		return fmt.Errorf("targets %q, want %q", got, want)
	}
	return nil
}

// accessPolicyTargets lists status.targets as "Kind/name".
func accessPolicyTargets(p *mcpv1alpha1.MCPAccessPolicy) []string {
	out := []string{}
	for _, t := range p.Status.Targets {
		out = append(out, string(t.Kind)+"/"+t.Name)
	}
	return out
}

func TestAccessPolicyReportsTheTargetsItSelects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	// Nothing listens there: the policy's status does not depend on the servers' health.
	const url = "http://127.0.0.1:9/mcp"
	github := httpServer(ns, "github", url)
	github.Labels = map[string]string{"team": "search"}
	web := httpServer(ns, "web", url)
	g.Expect(k8sClient.Create(ctx, github)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, web)).To(Succeed())
	toolset := &mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "assistant", Labels: map[string]string{"team": "search"}},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "github"}}},
	}
	g.Expect(k8sClient.Create(ctx, toolset)).To(Succeed())

	rules := []mcpv1alpha1.AccessPolicyRule{{
		Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "oidc:finance"}},
		Tools:    []string{"get_*"},
		Action:   mcpv1alpha1.AccessPolicyAllow,
		When:     `has(arguments.repo) && arguments.repo.startsWith("acme/")`,
	}}
	bySelector := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-selector"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "search"}},
			Rules:          rules,
		},
	}
	byRefs := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-refs"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "web"},
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPToolset, Name: "assistant"},
				{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "not-yet"},
			},
			Enforcement: mcpv1alpha1.AccessPolicyAudit,
			Rules:       rules,
		},
	}
	g.Expect(k8sClient.Create(ctx, bySelector)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, byRefs)).To(Succeed())

	awaitAccessPolicy(t, bySelector, "the selected targets enforced", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		if err := targetsAre(got, "MCPServer/github", "MCPToolset/assistant"); err != nil {
			return err
		}
		if got.Status.TargetCount != 2 || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("targetCount %d, observedGeneration %d of %d", got.Status.TargetCount, got.Status.ObservedGeneration, got.Generation)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Message != "Enforcing 1 rules on 2 targets" {
			return fmt.Errorf("Ready is %+v", c)
		}
		return kstatusIs(t, got, status.CurrentStatus)
	})
	awaitAccessPolicy(t, byRefs, "the named targets audited", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		if err := targetsAre(got, "MCPServer/web", "MCPToolset/assistant"); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady); c == nil || c.Message != "Auditing 1 rules on 2 targets" {
			return fmt.Errorf("Ready is %+v", c)
		}
		return nil
	})

	// The status follows the servers: a label removed, a named server created, a toolset
	// deleted.
	unlabel := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":null}}`))
	g.Expect(k8sClient.Patch(ctx, github, unlabel)).To(Succeed())
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "not-yet", url))).To(Succeed())
	g.Expect(k8sClient.Delete(ctx, toolset)).To(Succeed())
	awaitAccessPolicy(t, bySelector, "no target left to the selector", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		return targetsAre(got)
	})
	awaitAccessPolicy(t, byRefs, "the named server created, the toolset gone", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		return targetsAre(got, "MCPServer/not-yet", "MCPServer/web")
	})
}

func TestAccessPolicyWithABadExpressionIsNotReady(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)

	p := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "typo"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetRefs: []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "github"}},
			Rules: []mcpv1alpha1.AccessPolicyRule{
				{
					Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: "alice"}},
					Tools:    []string{"*"},
					Action:   mcpv1alpha1.AccessPolicyAllow,
				},
				{
					Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectServiceAccount, Namespace: "agents", Name: "triage"}},
					Tools:    []string{"get_*"},
					Action:   mcpv1alpha1.AccessPolicyAllow,
					When:     `caller.usrname == "alice"`,
				},
			},
		},
	}
	g.Expect(k8sClient.Create(ctx, p)).To(Succeed())
	awaitAccessPolicy(t, p, "InvalidExpression naming the rule and the field, Stalled", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		if err := conditionIn(got.Status.Conditions, mcpv1alpha1.ConditionReady, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidExpression,
			"spec.rules[1].when does not compile", "undefined field 'usrname'"); err != nil {
			return err
		}
		if err := conditionIn(got.Status.Conditions, mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return kstatusIs(t, got, status.FailedStatus)
	})

	// Fixing the expression makes it Ready, and Stalled goes away.
	testutil.Eventually(t, eventually, "the expression fixed", func() error {
		cur := &mcpv1alpha1.MCPAccessPolicy{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			return err
		}
		cur.Spec.Rules[1].When = `caller.username == "alice"`
		return k8sClient.Update(ctx, cur)
	})
	awaitAccessPolicy(t, p, "Ready, not Stalled, once the expression compiles", func(got *mcpv1alpha1.MCPAccessPolicy) error {
		if err := conditionIn(got.Status.Conditions, mcpv1alpha1.ConditionReady, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled); c != nil {
			return fmt.Errorf("Stalled is %+v, want it absent", c)
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		return kstatusIs(t, got, status.CurrentStatus)
	})
}
