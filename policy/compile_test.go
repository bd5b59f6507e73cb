package policy_test

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

func TestCompileRejectsUnusableExpressions(t *testing.T) {
	cases := []struct {
		name string
		when string
		want string
	}{
		{"syntax error", `arguments.repo.startsWith("acme/"`, "spec.rules[1].when does not compile"},
		{"misspelt caller field", `caller.usrname == "alice"`, "does not compile: ERROR: <input>:1:7: undefined field 'usrname'"},
		{"unknown variable", `request.user == "alice"`, "undeclared reference to 'request'"},
		{"not a bool", `caller.username`, "evaluates to string; it must evaluate to a bool"},
		{"an argument alone is not known to be a bool", `arguments.force`, "it must evaluate to a bool"},
		{"a function that does not exist", `arguments.repo.startswith("acme/")`, "does not compile"},
		{"an invalid regular expression literal", `caller.username.matches("(")`, "does not compile"},
		{"quadratic in the arguments", `arguments.all(k, arguments.all(j, k == j))`, "more than the 100000000 an expression may spend"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.Compile(object("p", refs("MCPServer", "github"), withRules(
				rule(allow, []string{"*"}, "", user("alice")),
				rule(allow, []string{"*"}, tc.when, user("alice")))))
			var exprErr *policy.ExpressionError
			if !errors.As(err, &exprErr) || exprErr.Rule != 1 {
				t.Fatalf("error %v, want an ExpressionError of rule 1", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "spec.rules[1].when ") {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q spans lines; a condition message is one line", err)
			}
		})
	}
}

func TestCompileNamesEveryBrokenRule(t *testing.T) {
	_, err := policy.Compile(object("p", refs("MCPServer", "github"), withRules(
		rule(allow, []string{"*"}, "caller.nope", user("a")),
		rule(allow, []string{"*"}, "true", user("a")),
		rule(deny, []string{"*"}, "1 +", user("a")))))
	if err == nil || !strings.Contains(err.Error(), "spec.rules[0].when") || !strings.Contains(err.Error(), "spec.rules[2].when") || strings.Contains(err.Error(), "spec.rules[1]") {
		t.Errorf("error %v, want rules 0 and 2 named, and only them", err)
	}
}

func TestCompileAcceptsTheIssueExpressions(t *testing.T) {
	for _, when := range []string{
		`has(arguments.repo) && arguments.repo.startsWith("acme/")`,
		`tool.annotations.destructiveHint == true`,
		`caller.groups.exists(g, g.startsWith("oidc:"))`,
		`arguments.repo.matches("^acme/[a-z0-9-]+$")`,
		`!has(arguments.path) || !arguments.path.contains("..")`,
		`caller.claims.?email.orValue("").endsWith("@example.com")`,
		`size(arguments) <= 10 && method == "tools/call" && target.kind == "MCPServer"`,
		`resource.uri.startsWith("file:///docs/") || prompt.name == "x"`,
		`"admin" in caller.extra.?roles.orValue([])`,
	} {
		if _, err := policy.Compile(object("p", refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, when, user("a"))))); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

func TestCompileOfAnInvalidSelectorSelectsTheWholeNamespace(t *testing.T) {
	p := object("p", withRules(rule(allow, []string{"*"}, "", group("system:authenticated"))))
	p.Spec.TargetSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near", Values: []string{"a"}}}}
	c, err := policy.Compile(p)
	if err == nil || !strings.Contains(err.Error(), "spec.targetSelector is invalid") {
		t.Fatalf("error %v, want the selector named", err)
	}
	var exprErr *policy.ExpressionError
	if errors.As(err, &exprErr) {
		t.Errorf("an invalid selector reported as an expression error: %v", err)
	}
	if !c.Selects(bystander) || !c.Selects(assistant) {
		t.Error("a policy with an invalid selector does not select every target of its namespace")
	}
	if v := policy.Decide(alice, bystander, call("x", nil), []*policy.Compiled{c}); v.Effect != policy.EffectDeny {
		t.Errorf("verdict %s, want Deny", v.Effect)
	}
}

func TestCompiledKeepsItsIdentity(t *testing.T) {
	p := object("p", refs("MCPToolset", "assistant"), audit)
	p.Generation = 7
	c, err := policy.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace() != ns || c.Name() != "p" || c.Generation() != 7 || c.Enforcement() != mcpv1alpha1.AccessPolicyAudit || c.Err() != nil {
		t.Errorf("compiled %s/%s generation %d %s err %v", c.Namespace(), c.Name(), c.Generation(), c.Enforcement(), c.Err())
	}
	if !c.Selects(assistant) || c.Selects(github) {
		t.Error("targetRefs select the wrong targets")
	}
}
