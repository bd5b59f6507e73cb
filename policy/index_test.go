package policy

import (
	"fmt"
	"slices"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// appliesTo is what the index answers for one rule: whether a subject of the rule is the
// caller (its username, one of its groups, or the group every caller is in one of).
func appliesTo(subjects []mcpv1alpha1.AccessPolicySubject, c *Caller) bool {
	for _, s := range subjects {
		switch s := compileSubject(s); {
		case s.username != "":
			if s.username == c.Username {
				return true
			}
		case s.group == allAuthenticated:
			if c.Username != anonymousUser {
				return true
			}
		case s.group == allUnauthenticated:
			if c.Username == anonymousUser {
				return true
			}
		case s.group != "":
			if slices.Contains(c.Groups, s.group) {
				return true
			}
		}
	}
	return false
}

func TestRuleIndexReachesTheRulesWhoseSubjectsAreTheCaller(t *testing.T) {
	sub := func(kind mcpv1alpha1.AccessPolicySubjectKind, ns, name string) mcpv1alpha1.AccessPolicySubject {
		return mcpv1alpha1.AccessPolicySubject{Kind: kind, Namespace: ns, Name: name}
	}
	pool := []mcpv1alpha1.AccessPolicySubject{
		sub(mcpv1alpha1.AccessPolicySubjectUser, "", "oidc:alice@example.com"),
		sub(mcpv1alpha1.AccessPolicySubjectUser, "", "system:anonymous"),
		sub(mcpv1alpha1.AccessPolicySubjectUser, "", ""),
		sub(mcpv1alpha1.AccessPolicySubjectServiceAccount, "agents", "triage"),
		sub(mcpv1alpha1.AccessPolicySubjectGroup, "", "oidc:finance"),
		sub(mcpv1alpha1.AccessPolicySubjectGroup, "", "system:authenticated"),
		sub(mcpv1alpha1.AccessPolicySubjectGroup, "", "system:unauthenticated"),
		sub(mcpv1alpha1.AccessPolicySubjectGroup, "", ""),
		// The same length as oidc:finance, and as alice's username.
		sub(mcpv1alpha1.AccessPolicySubjectGroup, "", "oidc:finanze"),
		sub(mcpv1alpha1.AccessPolicySubjectUser, "", "oidc:alice@example.org"),
	}
	callers := []Caller{
		{Username: "oidc:alice@example.com", Groups: []string{"oidc:finance"}},
		{Username: "oidc:alice@example.org"},
		{Username: "system:serviceaccount:agents:triage", Groups: []string{"system:serviceaccounts", "system:authenticated"}},
		{Username: "system:anonymous"},
		// Groups that claim what the username denies change nothing.
		{Username: "system:anonymous", Groups: []string{"system:authenticated", "oidc:finance"}},
		{Username: "oidc:eve", Groups: []string{"system:unauthenticated"}},
		{Username: ""},
	}
	// Every rule of one subject, and of pairs of them, in one policy.
	var subjects [][]mcpv1alpha1.AccessPolicySubject
	for i := range pool {
		subjects = append(subjects, pool[i:i+1])
		for j := i + 1; j < len(pool); j += 3 {
			subjects = append(subjects, []mcpv1alpha1.AccessPolicySubject{pool[i], pool[j]})
		}
	}
	if len(subjects) > maxRules {
		t.Fatalf("%d rules, more than a policy has", len(subjects))
	}
	var x ruleIndex
	for i, s := range subjects {
		r := rule{index: i, action: mcpv1alpha1.AccessPolicyAllow}
		r.globs[kindTool] = compileGlobs([]string{"*"}, true)
		x.add(i, &r, s)
	}
	for _, c := range callers {
		reachable := x.reachable(&c, kindTool)
		for i, s := range subjects {
			if got, want := reachable&(1<<i) != 0, appliesTo(s, &c); got != want {
				t.Errorf("caller %+v, subjects %v: reachable %v, want %v", c, s, got, want)
			}
		}
		if r := x.reachable(&c, kindResource); r != 0 {
			t.Errorf("caller %+v reaches rules %b that name no resource", c, r)
		}
	}
}

func TestAPolicyOfTooManyRulesDeniesEverything(t *testing.T) {
	p := &mcpv1alpha1.MCPAccessPolicy{}
	p.Namespace, p.Name = "team-a", "long"
	p.Spec.TargetRefs = []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: "github"}}
	for i := range maxRules + 1 {
		p.Spec.Rules = append(p.Spec.Rules, mcpv1alpha1.AccessPolicyRule{Action: mcpv1alpha1.AccessPolicyAllow, Tools: []string{"*"},
			Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: fmt.Sprintf("user-%d", i)}}})
	}
	c, err := Compile(p)
	if err == nil || err.Error() != "spec.rules has 65 rules, more than the 64 a policy may have" {
		t.Fatalf("error %v, want one that says the policy has too many rules", err)
	}
	target := Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Namespace: "team-a", Name: "github"}
	v := Decide(Caller{Username: "user-64"}, target, Request{Method: MethodToolsCall, Tool: Tool{Name: "x"}}, []*Compiled{c})
	if v.Effect != EffectDeny || v.Policy != "team-a/long" {
		t.Errorf("verdict %+v, want Deny by the policy", v)
	}
}
