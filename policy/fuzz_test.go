package policy_test

import (
	"testing"

	"github.com/switchboard-mcp/switchboard/internal/toolglob"
	"github.com/switchboard-mcp/switchboard/policy"
)

// FuzzDecide varies the caller, the tool, an argument, a Deny glob and an Allow rule's
// expression, and checks what must always hold: Decide does not panic, a Deny rule that
// applies refuses the call whatever else allows it, and a call Decide lets run is one
// tools/list shows (a tool Listable hides is never allowed).
func FuzzDecide(f *testing.F) {
	f.Add("get_issue", "oidc:alice", "oidc:finance", "acme/x", "delete_*", `has(arguments.repo) && arguments.repo.startsWith("acme/")`, true)
	f.Add("delete_repo", "system:serviceaccount:agents:triage", "system:authenticated", "", "*", "true", false)
	f.Add("x", "", "", "\x00", "[", "arguments.repo.size() > 3", true)
	f.Add("push", "bob", "oidc:sre", "1", "p?sh", "tool.annotations.destructiveHint", false)
	f.Add("a", "b", "c", "d", "*a*", "int(arguments.repo) > 2", true)
	f.Fuzz(func(t *testing.T, tool, username, grp, repo, denyGlob, when string, denyHasWhen bool) {
		denyRule := rule(deny, []string{denyGlob}, "", group(grp))
		if denyHasWhen {
			denyRule.When = `arguments.repo == "` + "forbidden" + `"`
		}
		policies := []*policy.Compiled{}
		for _, obj := range []struct {
			name string
			opts []func(*mcpvSpec)
		}{
			{"allow", []func(*mcpvSpec){refs("MCPServer", "github"), withRules(rule(allow, []string{"*"}, when, group(grp), user(username)))}},
			{"deny", []func(*mcpvSpec){selector(map[string]string{"team": "search"}), withRules(denyRule)}},
			{"approve", []func(*mcpvSpec){refs("MCPServer", "github"), withRules(rule(approval, []string{"p*"}, "", group("oidc:sre")))}},
		} {
			// A policy that does not compile is used in its fail-closed form.
			c, _ := policy.Compile(object(obj.name, obj.opts...))
			policies = append(policies, c)
		}
		caller := policy.Caller{Username: username, Groups: []string{grp}}
		req := call(tool, map[string]any{"repo": repo})
		v := policy.Decide(caller, github, req, policies)

		matches, err := toolglob.Match(denyGlob, tool)
		denyApplies := !denyHasWhen && grp != "" && (matches || err != nil)
		if denyApplies && v.Effect != policy.EffectDeny {
			t.Fatalf("a Deny rule applies, verdict %s (%s)", v.Effect, v.Reason)
		}
		if v.Effect != policy.EffectDeny && !policy.Listable(caller, github, req.Tool, policies) {
			t.Fatalf("verdict %s (%s) for a tool tools/list hides", v.Effect, v.Reason)
		}
		if v.Effect == "" || v.Reason == "" {
			t.Fatalf("empty verdict %+v", v)
		}
	})
}
