package policy_test

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

func TestDecide(t *testing.T) {
	issue := issuePolicy(t)
	// sreAllow lets SREs call every tool; the issue policy's RequireApproval still applies
	// to the destructive ones.
	sreAllow := compiled(t, "sre", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, "", group("oidc:sre"))))
	everyone := compiled(t, "a-everyone", selector(map[string]string{"team": "search"}),
		withRules(rule(allow, []string{"*"}, "", group("system:authenticated"))))
	noDeletes := compiled(t, "z-no-deletes", selector(map[string]string{"team": "search"}),
		withRules(rule(deny, []string{"*delete*"}, "", user("oidc:eve@example.com"), group("oidc:finance"))))
	auditDeny := compiled(t, "audit-deny", refs("MCPServer", "github"), audit,
		withRules(rule(deny, []string{"search_*"}, "", group("oidc:finance"))))
	auditOnly := compiled(t, "audit-only", refs("MCPServer", "bystander"), audit,
		withRules(rule(allow, []string{"get_*"}, "", user("oidc:eve@example.com"))))
	toolsetOnly := compiled(t, "toolset-only", refs("MCPToolset", "assistant"), withRules(rule(allow, []string{"*"}, "", user("oidc:eve@example.com"))))
	// A server named like the toolset: a ref of kind MCPServer does not select the toolset.
	serverNamedAssistant := compiled(t, "server-named-assistant", refs("MCPServer", "assistant"), withRules(rule(deny, []string{"*"}, "", group("system:authenticated"))))
	otherNamespace := func() *policy.Compiled {
		p := object("elsewhere", selector(nil), withRules(rule(deny, []string{"*"}, "", group("system:authenticated"))))
		p.Namespace = "team-b"
		c, err := policy.Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}()
	args := func(t testing.TB, when string) *policy.Compiled {
		return compiled(t, "args", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, when, user("oidc:eve@example.com"))))
	}
	readDocs := compiled(t, "docs", refs("MCPServer", "github"), withRules(
		mcpv1alpha1.AccessPolicyRule{Subjects: []mcpv1alpha1.AccessPolicySubject{group("oidc:finance")}, Resources: []string{"file:///docs/*"}, Action: allow},
		mcpv1alpha1.AccessPolicyRule{Subjects: []mcpv1alpha1.AccessPolicySubject{group("oidc:finance")}, Prompts: []string{"summarize_*"}, Action: allow,
			When: `method == "prompts/get" && prompt.name.endsWith("_report") && arguments.quarter == "Q3"`},
	))

	destructive := policy.Tool{Name: "push_commit"} // no annotations: MCP says destructive
	harmless := policy.Tool{Name: "create_issue", DestructiveHint: ptr(false), ReadOnlyHint: ptr(false)}

	cases := []struct {
		name     string
		policies []*policy.Compiled
		caller   policy.Caller
		target   policy.Target
		req      policy.Request
		effect   policy.Effect
		policy   string // "" when no policy decided
		rule     int
		reason   string // a fragment of the reason
		audit    policy.Effect
	}{
		// Targets no policy selects.
		{"no policy at all", nil, eve, github, call("delete_repo", nil), policy.EffectAllow, "", -1, "no Enforce access policy governs the tool calls of MCPServer team-a/github", ""},
		{"a target no policy selects", []*policy.Compiled{issue, noDeletes}, eve, bystander, call("delete_repo", nil), policy.EffectAllow, "", -1, "no Enforce access policy governs", ""},
		{"a policy of another namespace", []*policy.Compiled{otherNamespace}, eve, github, call("get_issue", nil), policy.EffectAllow, "", -1, "no Enforce access policy governs", ""},
		{"nil entries are ignored", []*policy.Compiled{nil, nil}, eve, github, call("get_issue", nil), policy.EffectAllow, "", -1, "no Enforce", ""},

		// The issue's policy, callers of each kind.
		{"OIDC group member, argument in acme", []*policy.Compiled{issue}, alice, github, call("get_issue", map[string]any{"repo": "acme/widgets"}), policy.EffectAllow, ns + "/github-access", 0, `allows tool "get_issue" to "oidc:alice@example.com"`, ""},
		{"OIDC group member, argument outside acme", []*policy.Compiled{issue}, alice, github, call("get_issue", map[string]any{"repo": "evil/widgets"}), policy.EffectDeny, "", -1, `no rule of the access policies that select MCPServer team-a/github allows tool "get_issue"`, ""},
		{"OIDC group member, argument missing", []*policy.Compiled{issue}, alice, github, call("get_issue", nil), policy.EffectDeny, "", -1, "no rule", ""},
		{"OIDC group member, tool no rule names", []*policy.Compiled{issue}, alice, github, call("merge_pull_request", map[string]any{"repo": "acme/widgets"}), policy.EffectDeny, "", -1, "no rule", ""},
		{"ServiceAccount subject", []*policy.Compiled{issue}, triage, github, call("search_code", map[string]any{"repo": "acme/widgets"}), policy.EffectAllow, ns + "/github-access", 0, "allows", ""},
		{"ServiceAccount of another namespace", []*policy.Compiled{issue}, policy.Caller{Username: "system:serviceaccount:other:triage", Groups: []string{"system:serviceaccounts"}}, github, call("search_code", map[string]any{"repo": "acme/widgets"}), policy.EffectDeny, "", -1, "no rule", ""},
		{"a caller no rule names", []*policy.Compiled{issue}, eve, github, call("get_issue", map[string]any{"repo": "acme/widgets"}), policy.EffectDeny, "", -1, `"oidc:eve@example.com"`, ""},
		{"the toolset is a target too", []*policy.Compiled{issue}, alice, assistant, call("list_issues", map[string]any{"repo": "acme/x"}), policy.EffectAllow, ns + "/github-access", 0, "", ""},

		// Every effect, and precedence.
		{"Deny by system:authenticated reaches a caller whose groups do not list it", []*policy.Compiled{issue}, alice, github, call("delete_repo", map[string]any{"repo": "acme/widgets"}), policy.EffectDeny, ns + "/github-access", 2, `rule 2 of access policy team-a/github-access denies tool "delete_repo"`, ""},
		{"Deny wins over RequireApproval", []*policy.Compiled{issue}, bob, github, call("delete_repo", nil), policy.EffectDeny, ns + "/github-access", 2, "denies", ""},
		{"RequireApproval for a tool without annotations (destructive by default)", []*policy.Compiled{issue}, bob, github, callTool(destructive), policy.EffectRequireApproval, ns + "/github-access", 1, `requires approval for tool "push_commit"`, ""},
		{"RequireApproval wins over another policy's Allow", []*policy.Compiled{sreAllow, issue}, bob, github, callTool(destructive), policy.EffectRequireApproval, ns + "/github-access", 1, "requires approval", ""},
		{"Allow of another policy where approval's when is false", []*policy.Compiled{issue, sreAllow}, bob, github, callTool(harmless), policy.EffectAllow, ns + "/sre", 0, "allows", ""},
		{"approval's when is false and nothing allows", []*policy.Compiled{issue}, bob, github, callTool(harmless), policy.EffectDeny, "", -1, "no rule", ""},
		{"Deny of a later policy wins over an earlier Allow", []*policy.Compiled{everyone, noDeletes}, alice, github, call("bulk_delete", nil), policy.EffectDeny, ns + "/z-no-deletes", 0, "denies", ""},
		{"Deny of a policy by user name", []*policy.Compiled{noDeletes, everyone}, eve, github, call("delete_all", nil), policy.EffectDeny, ns + "/z-no-deletes", 0, "", ""},
		{"union of allows across policies", []*policy.Compiled{noDeletes, everyone}, bob, github, call("bulk_delete", nil), policy.EffectAllow, ns + "/a-everyone", 0, "", ""},

		// targetRefs and targetSelector.
		{"selector selects the labelled server", []*policy.Compiled{noDeletes}, eve, github, call("get_issue", nil), policy.EffectDeny, "", -1, "no rule", ""},
		{"selector does not select other labels", []*policy.Compiled{noDeletes}, eve, bystander, call("delete_all", nil), policy.EffectAllow, "", -1, "no Enforce", ""},
		{"toolset ref selects the toolset", []*policy.Compiled{toolsetOnly}, eve, assistant, call("anything", nil), policy.EffectAllow, ns + "/toolset-only", 0, "", ""},
		{"toolset ref does not select a server", []*policy.Compiled{toolsetOnly}, eve, github, call("anything", nil), policy.EffectAllow, "", -1, "no Enforce", ""},
		{"server ref does not select a toolset of that name", []*policy.Compiled{serverNamedAssistant}, eve, assistant, call("anything", nil), policy.EffectAllow, "", -1, "no Enforce", ""},

		// Audit mode.
		{"Audit policy alone refuses nothing", []*policy.Compiled{auditDeny}, alice, github, call("search_code", nil), policy.EffectAllow, "", -1, "no Enforce", policy.EffectDeny},
		{"Audit Deny beside an Enforce Allow", []*policy.Compiled{issue, auditDeny}, alice, github, call("search_code", map[string]any{"repo": "acme/x"}), policy.EffectAllow, ns + "/github-access", 0, "", policy.EffectDeny},
		{"Audit policy that would allow", []*policy.Compiled{auditOnly}, eve, bystander, call("get_weather", nil), policy.EffectAllow, "", -1, "no Enforce", policy.EffectAllow},
		{"Audit policy that would refuse for lack of an allow", []*policy.Compiled{auditOnly}, eve, bystander, call("set_weather", nil), policy.EffectAllow, "", -1, "", policy.EffectDeny},
		{"Enforce Deny stays Deny in the audit", []*policy.Compiled{issue, auditDeny}, alice, github, call("delete_repo", nil), policy.EffectDeny, ns + "/github-access", 2, "", policy.EffectDeny},

		// Arguments of each type, and caller's attributes.
		{"number argument within bound", []*policy.Compiled{args(t, "arguments.limit <= 100")}, eve, github, call("list", map[string]any{"limit": float64(50)}), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"number argument beyond bound", []*policy.Compiled{args(t, "arguments.limit <= 100")}, eve, github, call("list", map[string]any{"limit": float64(500)}), policy.EffectDeny, "", -1, "no rule", ""},
		{"integer argument", []*policy.Compiled{args(t, "arguments.limit <= 100")}, eve, github, call("list", map[string]any{"limit": int64(7)}), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"bool argument", []*policy.Compiled{args(t, "arguments.dryRun == true")}, eve, github, call("deploy", map[string]any{"dryRun": true}), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"bool argument false", []*policy.Compiled{args(t, "arguments.dryRun == true")}, eve, github, call("deploy", map[string]any{"dryRun": false}), policy.EffectDeny, "", -1, "no rule", ""},
		{"nested map argument", []*policy.Compiled{args(t, "arguments.options.depth < 3 && arguments.options.mode == 'fast'")}, eve, github, call("crawl", map[string]any{"options": map[string]any{"depth": float64(2), "mode": "fast"}}), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"list argument", []*policy.Compiled{args(t, "arguments.labels.all(l, l.startsWith('team-')) && !('admin' in arguments.labels)")}, eve, github, call("tag", map[string]any{"labels": []any{"team-a", "team-b"}}), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"list argument with a forbidden entry", []*policy.Compiled{args(t, "arguments.labels.all(l, l.startsWith('team-'))")}, eve, github, call("tag", map[string]any{"labels": []any{"team-a", "root"}}), policy.EffectDeny, "", -1, "no rule", ""},
		{"claims of an OIDC caller", []*policy.Compiled{compiled(t, "claims", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, "caller.claims.department == 'finance' && 'mfa' in caller.claims.amr && caller.claims.level >= 3 && 'repo:read' in caller.extra['scopes']", group("oidc:finance"))))}, alice, github, call("x", nil), policy.EffectAllow, ns + "/claims", 0, "", ""},
		{"claims of a Kubernetes caller are empty", []*policy.Compiled{compiled(t, "claims", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, "!has(caller.claims.department) && caller.uid != '' && 'system:serviceaccounts:agents' in caller.groups", group("system:authenticated"))))}, triage, github, call("x", nil), policy.EffectAllow, ns + "/claims", 0, "", ""},
		{"target and method in CEL", []*policy.Compiled{args(t, "target.kind == 'MCPServer' && target.name == 'github' && target.namespace == 'team-a' && method == 'tools/call' && tool.name == 'x'")}, eve, github, call("x", nil), policy.EffectAllow, ns + "/args", 0, "", ""},
		{"annotations in CEL", []*policy.Compiled{args(t, "tool.annotations.readOnlyHint && !tool.annotations.destructiveHint && tool.annotations.title == 'Read'")}, eve, github, callTool(policy.Tool{Name: "read", Title: "Read", ReadOnlyHint: ptr(true), DestructiveHint: ptr(false)}), policy.EffectAllow, ns + "/args", 0, "", ""},

		// CEL run-time errors deny.
		{"a number compared with a string argument", []*policy.Compiled{args(t, "arguments.limit <= 100")}, eve, github, call("list", map[string]any{"limit": "lots"}), policy.EffectDeny, ns + "/args", 0, "could not be evaluated", ""},
		{"a missing key", []*policy.Compiled{args(t, "arguments.repo.startsWith('acme/')")}, eve, github, call("list", nil), policy.EffectDeny, ns + "/args", 0, "no such key", ""},
		{"an Allow rule that fails denies though another allows", []*policy.Compiled{everyone, args(t, "arguments.repo.startsWith('acme/')")}, eve, github, call("list", nil), policy.EffectDeny, ns + "/args", 0, "could not be evaluated", ""},

		// resources/read and prompts/get, governed where a policy names them.
		{"resources are not governed by a tools-only policy", []*policy.Compiled{issue}, eve, github, policy.Request{Method: policy.MethodResourcesRead, Resource: "file:///secret"}, policy.EffectAllow, "", -1, "governs the resource reads", ""},
		{"resource a rule allows", []*policy.Compiled{issue, readDocs}, alice, github, policy.Request{Method: policy.MethodResourcesRead, Resource: "file:///docs/a/b.md"}, policy.EffectAllow, ns + "/docs", 0, `resource "file:///docs/a/b.md"`, ""},
		{"resource no rule allows, query kept out of the reason", []*policy.Compiled{issue, readDocs}, alice, github, policy.Request{Method: policy.MethodResourcesRead, Resource: "https://x.example/?token=s3cret"}, policy.EffectDeny, "", -1, `resource "https://x.example/"`, ""},
		{"prompt a rule allows", []*policy.Compiled{readDocs}, alice, github, policy.Request{Method: policy.MethodPromptsGet, Prompt: "summarize_report", Arguments: map[string]any{"quarter": "Q3"}}, policy.EffectAllow, ns + "/docs", 1, "", ""},
		{"prompt whose when is false", []*policy.Compiled{readDocs}, alice, github, policy.Request{Method: policy.MethodPromptsGet, Prompt: "summarize_report", Arguments: map[string]any{"quarter": "Q4"}}, policy.EffectDeny, "", -1, `prompt "summarize_report"`, ""},
		{"prompts are not governed by a tools-only policy", []*policy.Compiled{issue}, eve, github, policy.Request{Method: policy.MethodPromptsGet, Prompt: "x"}, policy.EffectAllow, "", -1, "governs the prompt gets", ""},
		{"a method policies do not govern", []*policy.Compiled{issue}, eve, github, policy.Request{Method: "completion/complete"}, policy.EffectAllow, "", -1, `access policies do not govern "completion/complete"`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := policy.Decide(tc.caller, tc.target, tc.req, tc.policies)
			if v.Effect != tc.effect || v.Policy != tc.policy || v.Rule != tc.rule {
				t.Errorf("verdict %s by %q rule %d, want %s by %q rule %d (reason: %s)", v.Effect, v.Policy, v.Rule, tc.effect, tc.policy, tc.rule, v.Reason)
			}
			if !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("reason %q does not say %q", v.Reason, tc.reason)
			}
			if strings.Contains(v.Reason, "s3cret") {
				t.Errorf("reason %q quotes a query string", v.Reason)
			}
			switch {
			case tc.audit == "" && v.Audit != nil:
				t.Errorf("audit verdict %+v, want none: no Audit policy selects the target", *v.Audit)
			case tc.audit != "" && v.Audit == nil:
				t.Errorf("no audit verdict, want %s", tc.audit)
			case tc.audit != "" && v.Audit.Effect != tc.audit:
				t.Errorf("audit verdict %s (%s), want %s", v.Audit.Effect, v.Audit.Reason, tc.audit)
			}

			// The order the policies come in changes nothing.
			shuffled := append([]*policy.Compiled(nil), tc.policies...)
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if again := policy.Decide(tc.caller, tc.target, tc.req, shuffled); !reflect.DeepEqual(again, v) {
				t.Errorf("verdict depends on the policies' order: %+v, then %+v", v, again)
			}
		})
	}
}

func TestDecideDeniesWhenAnExpressionRunsOutOfBudget(t *testing.T) {
	// A pattern of 31 characters on a string of a million: within the compile-time
	// estimate (one such match on the largest request), beyond the per-call limit twice.
	const match = "arguments.s.matches('^(a|a|a|a|a|a|a|a|a|a|a|a|a|a|a|b)+$')"
	long := map[string]any{"s": strings.Repeat("a", 1_000_000)}
	p := compiled(t, "costly", refs("MCPServer", "github"), withRules(
		rule(allow, []string{"*"}, match+" && "+match, group("system:authenticated"))))
	v := policy.Decide(eve, github, call("x", long), []*policy.Compiled{p})
	if v.Effect != policy.EffectDeny || v.Rule != 0 || !strings.Contains(v.Reason, "cost limit exceeded") {
		t.Errorf("verdict %s rule %d (%s), want Deny by rule 0 for exceeding the cost limit", v.Effect, v.Rule, v.Reason)
	}
	if v := policy.Decide(eve, github, call("x", map[string]any{"s": "aaa"}), []*policy.Compiled{p}); v.Effect != policy.EffectAllow {
		t.Errorf("verdict %s (%s) on a short argument, want Allow", v.Effect, v.Reason)
	}

	// Each expression within the per-call limit, together beyond the policy's budget.
	var rules []mcpv1alpha1.AccessPolicyRule
	for range 20 {
		rules = append(rules, rule(allow, []string{"*"}, match+" && false", group("system:authenticated")))
	}
	p = compiled(t, "budget", refs("MCPServer", "github"), withRules(rules...))
	v = policy.Decide(eve, github, call("x", long), []*policy.Compiled{p})
	if v.Effect != policy.EffectDeny || v.Rule <= 0 || !strings.Contains(v.Reason, "one policy may spend on one request") {
		t.Errorf("verdict %s rule %d (%s), want Deny by a later rule for exceeding the policy's budget", v.Effect, v.Rule, v.Reason)
	}
}

func TestDecideDeniesWhenAComprehensionRunsTooLong(t *testing.T) {
	// CEL's cost tracker slows down quadratically with a comprehension's iterations: a
	// list of 400,000 items would take minutes within the cost limit. The evaluation is
	// cancelled instead.
	items := make([]any, 400_000)
	for i := range items {
		items[i] = "x"
	}
	p := compiled(t, "long", refs("MCPServer", "github"), withRules(
		rule(allow, []string{"*"}, "arguments.items.exists(i, i == 'y')", group("system:authenticated"))))
	v := policy.Decide(eve, github, call("x", map[string]any{"items": items}), []*policy.Compiled{p})
	if v.Effect != policy.EffectDeny || v.Rule != 0 || !strings.Contains(v.Reason, "cancelled") {
		t.Errorf("verdict %s rule %d (%s), want Deny by rule 0, cancelled", v.Effect, v.Rule, v.Reason)
	}
}

func TestDecideDeniesThroughAPolicyThatDoesNotCompile(t *testing.T) {
	broken, err := policy.Compile(object("broken", refs("MCPServer", "github"), withRules(
		rule(allow, []string{"*"}, "arguments.repo.startsWith(", group("system:authenticated")))))
	if err == nil {
		t.Fatal("a policy whose expression does not compile compiled")
	}
	everyone := compiled(t, "everyone", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, "", group("system:authenticated"))))
	v := policy.Decide(alice, github, call("get_issue", nil), []*policy.Compiled{everyone, broken})
	if v.Effect != policy.EffectDeny || v.Policy != ns+"/broken" || !strings.Contains(v.Reason, "is invalid") {
		t.Errorf("verdict %s by %q (%s), want Deny by the broken policy", v.Effect, v.Policy, v.Reason)
	}
	for _, m := range []string{policy.MethodResourcesRead, policy.MethodPromptsGet} {
		if v := policy.Decide(alice, github, policy.Request{Method: m}, []*policy.Compiled{broken}); v.Effect != policy.EffectDeny {
			t.Errorf("%s: verdict %s, want Deny: a broken policy governs everything", m, v.Effect)
		}
	}
	if v := policy.Decide(alice, bystander, call("get_issue", nil), []*policy.Compiled{broken}); v.Effect != policy.EffectAllow {
		t.Errorf("verdict %s on a target the broken policy does not select, want Allow", v.Effect)
	}
	if policy.Listable(alice, github, policy.Tool{Name: "get_issue"}, []*policy.Compiled{everyone, broken}) {
		t.Error("a broken policy's target lists a tool")
	}
}

func TestListable(t *testing.T) {
	issue := issuePolicy(t)
	auditAll := compiled(t, "audit", refs("MCPServer", "bystander"), audit, withRules(rule(deny, []string{"*"}, "", group("system:authenticated"))))
	conditionalDeny := compiled(t, "conditional", refs("MCPServer", "github"), withRules(
		rule(allow, []string{"*"}, "", group("oidc:sre")),
		rule(deny, []string{"*"}, "arguments.force == true", group("oidc:sre"))))
	cases := []struct {
		name     string
		policies []*policy.Compiled
		caller   policy.Caller
		target   policy.Target
		tool     string
		want     bool
	}{
		{"no policy", nil, eve, github, "delete_repo", true},
		{"a target no policy selects", []*policy.Compiled{issue}, eve, bystander, "delete_repo", true},
		{"a rule could allow it (its when is not known yet)", []*policy.Compiled{issue}, alice, github, "get_issue", true},
		{"ServiceAccount", []*policy.Compiled{issue}, triage, assistant, "search_code", true},
		{"approval counts as allowing", []*policy.Compiled{issue}, bob, github, "push_commit", true},
		{"no rule names the tool", []*policy.Compiled{issue}, alice, github, "merge_pull_request", false},
		{"no rule names the caller", []*policy.Compiled{issue}, eve, github, "get_issue", false},
		{"a Deny rule without a when hides it", []*policy.Compiled{issue}, bob, github, "delete_branch", false},
		{"a Deny rule with a when does not hide it", []*policy.Compiled{conditionalDeny}, bob, github, "deploy", true},
		{"Audit policies hide nothing", []*policy.Compiled{auditAll}, eve, bystander, "anything", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := policy.Listable(tc.caller, tc.target, policy.Tool{Name: tc.tool}, tc.policies); got != tc.want {
				t.Errorf("Listable = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTheAnonymousCallerIsNotAuthenticated: a gateway that authenticates nobody calls
// everyone system:anonymous. A rule for system:authenticated must not let that caller
// in (as in Kubernetes RBAC); one for system:unauthenticated names it.
func TestTheAnonymousCallerIsNotAuthenticated(t *testing.T) {
	authenticated := compiled(t, "authenticated", refs("MCPServer", "github"),
		withRules(rule(allow, []string{"*"}, "", group("system:authenticated"))))
	unauthenticated := compiled(t, "unauthenticated", refs("MCPServer", "github"),
		withRules(rule(allow, []string{"*"}, "", group("system:unauthenticated"))))
	anonymous := policy.Caller{Username: "system:anonymous"}
	alice := policy.Caller{Username: "oidc:alice@example.com"}
	target := policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Namespace: "team-a", Name: "github"}
	req := policy.Request{Method: policy.MethodToolsCall, Tool: policy.Tool{Name: "get_issue"}}
	cases := []struct {
		name     string
		caller   policy.Caller
		policies []*policy.Compiled
		want     policy.Effect
	}{
		{"anonymous under system:authenticated", anonymous, []*policy.Compiled{authenticated}, policy.EffectDeny},
		{"alice under system:authenticated", alice, []*policy.Compiled{authenticated}, policy.EffectAllow},
		{"anonymous under system:unauthenticated", anonymous, []*policy.Compiled{unauthenticated}, policy.EffectAllow},
		{"alice under system:unauthenticated", alice, []*policy.Compiled{unauthenticated}, policy.EffectDeny},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if v := policy.Decide(tc.caller, target, req, tc.policies); v.Effect != tc.want {
				t.Errorf("effect %s (%s), want %s", v.Effect, v.Reason, tc.want)
			}
			if listed := policy.Listable(tc.caller, target, req.Tool, tc.policies); listed != (tc.want == policy.EffectAllow) {
				t.Errorf("listed %v, want %v", listed, tc.want == policy.EffectAllow)
			}
		})
	}
}

// TestAFailedConditionQuotesNoArgument: a `when` that fails on a caller's argument (a key
// looked up by the argument's value, a regular expression taken from it) refuses the
// call, and the reason, which the caller and the audit log both get, says what kind of
// failure it was without quoting the value: an argument may carry a token or a URL with
// its query string.
func TestAFailedConditionQuotesNoArgument(t *testing.T) {
	const secret = "https://idp.example/cb?code=s3cr3t-code"
	eve := policy.Caller{Username: "oidc:eve@example.com"}
	for when, kind := range map[string]string{
		`arguments[arguments.url] == 1`:    "no such key",
		`"x".matches(arguments.url + "(")`: "error parsing regexp",
	} {
		p := compiled(t, "p", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, when, user(eve.Username))))
		v := policy.Decide(eve, github, call("get_issue", map[string]any{"url": secret}), []*policy.Compiled{p})
		if v.Effect != policy.EffectDeny || !strings.Contains(v.Reason, kind) {
			t.Errorf("%s: %s %q; want Deny saying %q", when, v.Effect, v.Reason, kind)
		}
		if strings.Contains(v.Reason, "s3cr3t") || strings.Contains(v.Reason, "idp.example") {
			t.Errorf("%s: the reason quotes the argument: %q", when, v.Reason)
		}
	}
}
