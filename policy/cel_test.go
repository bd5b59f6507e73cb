package policy

import (
	"fmt"
	"strings"
	"testing"
)

func compileTestCondition(t testing.TB, expr string) *condition {
	t.Helper()
	env, err := celEnv()
	if err != nil {
		t.Fatal(err)
	}
	c, err := compileCondition(env, 0, expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return c
}

// boundedConditions cost the same whatever the request: they run without cost tracking.
var boundedConditions = []string{
	`has(arguments.force) && arguments.force == true`,
	`has(arguments.repo) && arguments.repo.startsWith("acme/")`,
	`!has(arguments.repo) || arguments.repo.startsWith("acme/")`,
	`tool.annotations.readOnlyHint`,
	`tool.annotations.destructiveHint == true && tool.name != "x"`,
	`caller.username == "oidc:alice@example.com" || caller.uid == "1"`,
	`caller.claims.department == "finance" && caller.claims.level >= 3`,
	`"repo:read" in ["repo:read", caller.uid]`,
	`arguments.a.b.c.d.e.f == 1 && caller.claims.a.b.c == "x"`,
	`size(arguments) < 4 && size(caller.groups) > 0`,
	`arguments.repo.endsWith("/widgets")`,
	`arguments.count + 1 > 2 && -arguments.count < 0 && arguments.count * 2 / 3 % 2 == 0`,
	`int(arguments.n) > 2 && double(arguments.n) < 9.5 && uint(arguments.count) > 0u`,
	`arguments.mode in ["read", "list"]`,
	`arguments.mode == "read" ? arguments.repo == "a" : dyn(arguments.repo) == 1`,
	`arguments.nested.inner == "x" && arguments.list[0] == 1`,
	`method == "tools/call" && target.name == "github" && resource.uri == "" && prompt.name == ""`,
	// Guarded by arguments, failing on the others.
	`int(arguments.count) > 1 && has(arguments.nested) && (has(arguments.force) && int(arguments.n) / 0 == 1)`,
	`!has(arguments.x) || int(arguments.n) / 0 == 1 || !has(arguments.force)`,
	`has(arguments.repo) || has(arguments.force)`,
	`!has(arguments.repo) && !has(arguments.force)`,
}

func TestArgumentGuards(t *testing.T) {
	for _, tc := range []struct {
		expr      string
		guards    []string
		guardless bool
	}{
		{`has(arguments.force) && arguments.force == true`, []string{"force"}, false},
		{`!has(arguments.repo) || arguments.repo.startsWith("acme/")`, []string{"repo"}, true},
		{`int(arguments.count) > 1 && has(arguments.nested) && (has(arguments.force) && int(arguments.n) / 0 == 1)`, []string{"nested", "force"}, false},
		{`!has(arguments.x) || int(arguments.n) / 0 == 1 || !has(arguments.force)`, []string{"x", "force"}, true},
		// Terms that decide nothing when the argument is absent.
		{`has(arguments.repo) || has(arguments.force)`, nil, true},
		{`!has(arguments.repo) && !has(arguments.force)`, nil, false},
		{`has(arguments.repo)`, nil, true},
		{`has(caller.claims.x) && has(arguments.nested.x)`, nil, false},
		{`(has(arguments.a) || true) && arguments.b == 1`, nil, false},
	} {
		c := compileTestCondition(t, tc.expr)
		if fmt.Sprint(c.guards) != fmt.Sprint(tc.guards) || (len(tc.guards) > 0 && c.guardless != tc.guardless) {
			t.Errorf("%s: guards %q (guardless %v), want %q (%v)", tc.expr, c.guards, c.guardless, tc.guards, tc.guardless)
		}
	}
}

func TestBoundedConditions(t *testing.T) {
	for _, expr := range boundedConditions {
		if c := compileTestCondition(t, expr); c.bounded == nil || c.bound == 0 || c.bound > perCallLimit {
			t.Errorf("%s: bounded %v, bound %d; want it bounded", expr, c.bounded != nil, c.bound)
		}
	}
	for _, expr := range []string{
		// Costs that grow with the request.
		`arguments.repo.startsWith(arguments.prefix)`,
		`arguments.repo == arguments.other`,
		`"oidc:x" in caller.groups`,
		`"repo:read" in caller.extra.scopes`,
		`string(arguments.n) != ""`,
		`arguments.repo.contains("x")`,
		// Functions outside untrackedFunctions.
		`arguments.repo.matches("^acme/")`,
		`arguments.repo.lowerAscii() == "x"`,
		`isURL(arguments.url)`,
		// Comprehensions.
		`arguments.items.exists(i, i == "y")`,
		`[1, 2].all(i, i > 0)`,
	} {
		if c := compileTestCondition(t, expr); c.bounded != nil {
			t.Errorf("%s: bounded (bound %d); want it evaluated with cost tracking", expr, c.bound)
		}
	}
}

// requestsForConditions are the requests the conditions are evaluated on: arguments
// absent, of the expected types, of others, and large.
func requestsForConditions() []evaluation {
	long := strings.Repeat("acme/", 200_000)
	items := make([]any, 100_000)
	for i := range items {
		items[i] = float64(i)
	}
	argSets := []map[string]any{
		nil,
		{},
		{"force": true, "repo": "acme/widgets", "count": float64(3), "n": "7", "mode": "read", "nested": map[string]any{"inner": "x"}, "list": []any{float64(1)},
			"a": map[string]any{"b": map[string]any{"c": map[string]any{"d": map[string]any{"e": map[string]any{"f": float64(1)}}}}}},
		{"force": "yes", "repo": float64(1), "count": "3", "n": []any{}, "mode": nil, "nested": "x", "list": map[string]any{}},
		{"repo": long, "prefix": long, "other": long, "list": items, "n": float64(1e300), "count": float64(-1)},
		{"repo": "other/x", "count": int64(4), "n": int64(9), "nested": map[string]any{}, "list": []any{}},
	}
	callers := []Caller{
		{Username: "oidc:alice@example.com", Groups: []string{"oidc:finance"}, Extra: map[string][]string{"scopes": {"repo:read"}},
			Claims: map[string]any{"department": "finance", "level": float64(3), "a": map[string]any{"b": map[string]any{"c": "x"}}}},
		{Username: "system:anonymous"},
	}
	var out []evaluation
	for _, args := range argSets {
		for _, c := range callers {
			readOnly := true
			out = append(out, evaluation{caller: c, target: Target{Kind: "MCPServer", Namespace: "team-a", Name: "github"},
				req: Request{Method: MethodToolsCall, Tool: Tool{Name: "get_issue", ReadOnlyHint: &readOnly}, Arguments: args}, kind: kindTool})
		}
	}
	return out
}

func TestUntrackedEvaluationAgreesWithTracked(t *testing.T) {
	requests := requestsForConditions()
	for _, expr := range boundedConditions {
		c := compileTestCondition(t, expr)
		for i := range requests {
			checkUntrackedAgrees(t, c, requests[i])
		}
	}
}

// checkUntrackedAgrees checks that c evaluated without cost tracking gives what it gives
// with cost tracking, on the request of e, and that it cost at most its bound.
func checkUntrackedAgrees(t *testing.T, c *condition, e evaluation) {
	t.Helper()
	if c.bounded == nil {
		t.Fatalf("%s is not bounded", c.source.Value())
	}
	tracked := (&evaluation{caller: e.caller, target: e.target, req: e.req, kind: e.kind}).evaluate(c, true)
	untracked := (&evaluation{caller: e.caller, target: e.target, req: e.req, kind: e.kind}).evaluate(c, false)
	if tracked.holds != untracked.holds || fmt.Sprint(tracked.err) != fmt.Sprint(untracked.err) {
		t.Errorf("%s on %v: tracked %v (%v), untracked %v (%v)", c.source.Value(), clipped(e.req.Arguments),
			tracked.holds, tracked.err, untracked.holds, untracked.err)
	}
	if !tracked.costed || untracked.costed || tracked.cost > c.bound {
		t.Errorf("%s on %v: cost %d (costed %v), bound %d", c.source.Value(), clipped(e.req.Arguments), tracked.cost, tracked.costed, c.bound)
	}
}

func clipped(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// FuzzUntrackedEvaluationAgreesWithTracked varies the arguments the bounded conditions
// read.
func FuzzUntrackedEvaluationAgreesWithTracked(f *testing.F) {
	f.Add("acme/widgets", "read", 3.0, true, "x")
	f.Add("", "", -1.0, false, "")
	f.Add("other", "list", 1e300, true, "\xff")
	conditions := make([]*condition, len(boundedConditions))
	for i, expr := range boundedConditions {
		conditions[i] = compileTestCondition(f, expr)
	}
	f.Fuzz(func(t *testing.T, repo, mode string, count float64, force bool, inner string) {
		for _, args := range []map[string]any{
			{"repo": repo, "mode": mode, "count": count, "n": count, "force": force, "nested": map[string]any{"inner": inner}, "list": []any{count}},
			{"repo": count, "mode": force, "count": repo, "n": inner, "force": mode, "nested": inner, "list": repo},
		} {
			e := evaluation{req: Request{Method: MethodToolsCall, Tool: Tool{Name: repo}, Arguments: args}, kind: kindTool,
				caller: Caller{Username: inner, Groups: []string{mode}, Claims: map[string]any{"department": repo, "level": count}}}
			for _, c := range conditions {
				checkUntrackedAgrees(t, c, e)
			}
		}
	})
}

func TestAPolicyOfBoundedConditionsIsUntracked(t *testing.T) {
	for _, tc := range []struct {
		when      []string
		untracked bool
	}{
		{[]string{"", `has(arguments.force)`, `tool.annotations.readOnlyHint`}, true},
		{[]string{"", ""}, true},
		{[]string{`has(arguments.force)`, `arguments.repo.matches("^acme/")`}, false},
	} {
		var rules []rule
		for _, w := range tc.when {
			r := rule{}
			if w != "" {
				r.when = *compileTestCondition(t, w)
			}
			rules = append(rules, r)
		}
		if got := untracked(rules); got != tc.untracked {
			t.Errorf("%q: untracked %v, want %v", tc.when, got, tc.untracked)
		}
	}
	// Bounded conditions whose bounds together exceed the budget are tracked.
	c := compileTestCondition(t, `has(arguments.force)`)
	c.bound = policyBudget/2 + 1
	if untracked([]rule{{when: *c}, {when: *c}}) {
		t.Error("conditions that may together exceed the budget are untracked")
	}
}

func TestATrackedPolicyNeverTakesAnUntrackedOutcome(t *testing.T) {
	c := compileTestCondition(t, `has(arguments.force)`)
	e := &evaluation{req: Request{Method: MethodToolsCall}, kind: kindTool}
	e.remember(c.source, e.evaluate(c, false))
	if _, seen := e.outcome(c.source, false); !seen {
		t.Error("an untracked policy does not reuse an outcome")
	}
	if _, seen := e.outcome(c.source, true); seen {
		t.Error("a tracked policy reuses an outcome whose cost is not known")
	}
	e.remember(c.source, e.evaluate(c, true))
	if o, seen := e.outcome(c.source, true); !seen || !o.costed || o.cost == 0 {
		t.Errorf("a tracked policy does not reuse a tracked outcome: %+v, %v", o, seen)
	}
	if len(e.outcomes) != 1 {
		t.Errorf("%d outcomes for one condition", len(e.outcomes))
	}
}
