package identity

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// reservedPrefix starts the usernames and groups Kubernetes keeps for itself.
const reservedPrefix = "system:"

// Bounds on claim validation rules, as a CEL program may loop over a token's claims.
const (
	// ruleCostLimit bounds the work one rule may do on one token (CEL's cost units).
	ruleCostLimit = 1_000_000
	// maxGroups bounds how many groups one token may map to.
	maxGroups = 1024
)

// checkName refuses a claim value that is not valid UTF-8 or holds a control character
// (C0, DEL or C1): no issuer has a reason to put one in a name, and a NUL or a line break
// in a name is how one group is made to read as two, in a key, a log or an audit line.
// The whole token is refused, not the one value dropped: a group left out silently could
// escape an access policy that denies it.
func checkName(value string) error {
	if !utf8.ValidString(value) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range value {
		if unicode.IsControl(r) {
			return fmt.Errorf("holds the control character %U", r)
		}
	}
	return nil
}

// registeredClaims are the claims go-oidc reads from a JWT with encoding/json, which
// matches keys regardless of case; a key that differs from one of them only in case is
// refused so that every reader of the token reads the same claim.
var registeredClaims = []string{"iss", "sub", "aud", "exp", "iat", "nbf", "nonce", "at_hash", "_claim_names", "_claim_sources"}

// decodeClaims decodes a JSON object of claims (a JWT's payload or an introspection
// answer) once and strictly: duplicate keys are refused, keys are exact, and a key that
// equals a registered claim's name but for case is refused.
func decodeClaims(data []byte) (map[string]any, error) {
	var claims map[string]any
	if err := jsonv2.Unmarshal(data, &claims); err != nil {
		return nil, fmt.Errorf("claims are not a JSON object without duplicate keys")
	}
	if claims == nil {
		return nil, fmt.Errorf("claims are not a JSON object")
	}
	for k := range claims {
		for _, r := range registeredClaims {
			if k != r && strings.EqualFold(k, r) {
				return nil, fmt.Errorf("claims hold %q and differ from the registered claim %q only in case", k, r)
			}
		}
	}
	return claims, nil
}

// claimsEnv is the CEL environment validation rules compile in: one variable, claims,
// a map from claim name to any JSON value, with optional types and the strings and lists
// extensions, as Kubernetes' AuthenticationConfiguration offers, and numbers compared
// across types.
var claimsEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("claims", cel.MapType(cel.StringType, cel.DynType)),
		cel.OptionalTypes(),
		// JSON numbers arrive as doubles: claims.exp > 0 compares a double with an int.
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
		ext.Lists(),
	)
	if err != nil {
		panic(fmt.Sprintf("identity: building the CEL environment: %v", err))
	}
	return env
}()

// compiledRule is one claim validation rule, compiled.
type compiledRule struct {
	program cel.Program
	message string
}

// compileRules compiles rules; a rule that does not compile, or does not evaluate to a
// bool, is an error naming its index.
func compileRules(rules []ValidationRule) ([]compiledRule, error) {
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		ast, iss := claimsEnv.Compile(r.Expression)
		if iss.Err() != nil {
			return nil, fmt.Errorf("claim validation rule %d does not compile: %w", i, iss.Err())
		}
		if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
			return nil, fmt.Errorf("claim validation rule %d evaluates to %s, not bool", i, t)
		}
		prg, err := claimsEnv.Program(ast, cel.CostLimit(ruleCostLimit), cel.InterruptCheckFrequency(100))
		if err != nil {
			return nil, fmt.Errorf("claim validation rule %d: %w", i, err)
		}
		msg := r.Message
		if msg == "" {
			msg = fmt.Sprintf("claim validation rule %d does not hold", i)
		}
		out = append(out, compiledRule{program: prg, message: msg})
	}
	return out, nil
}

// mapCaller maps verified claims to a Caller with p's claim mappings, then checks p's
// validation rules. Its refusals name the mapped username at most.
func (p *provider) mapCaller(ctx context.Context, claims map[string]any) (*Caller, error) {
	name := p.cfg.Name
	raw, ok := claims[p.cfg.UsernameClaim]
	value, isString := raw.(string)
	switch {
	case !ok:
		return nil, refuse(name, ReasonInvalidClaims, "the token has no %s claim for the username", p.cfg.UsernameClaim)
	case !isString || value == "":
		return nil, refuse(name, ReasonInvalidClaims, "the token's %s claim is not a non-empty string", p.cfg.UsernameClaim)
	}
	if err := checkName(value); err != nil {
		return nil, refuse(name, ReasonInvalidClaims, "the token's %s claim %v", p.cfg.UsernameClaim, err)
	}
	// As Kubernetes does: an email is a username only once verified, when the issuer says.
	if p.cfg.UsernameClaim == "email" {
		if v, ok := claims["email_verified"]; ok && v != true {
			return nil, refuse(name, ReasonInvalidClaims, "the token's email is not verified (email_verified is not true)")
		}
	}
	username := p.cfg.UsernamePrefix + value
	if strings.HasPrefix(username, reservedPrefix) {
		return nil, refuse(name, ReasonReservedName, "the mapped username %q starts with %q, which Kubernetes reserves", username, reservedPrefix)
	}
	groups, err := p.mapGroups(claims)
	if err != nil {
		return nil, err
	}
	for _, r := range p.rules {
		out, _, err := r.program.ContextEval(ctx, map[string]any{"claims": claims})
		if err != nil || out != types.True {
			return nil, refuse(name, ReasonRuleFailed, "%s", r.message)
		}
	}
	caller := NewCaller(authenticationv1.UserInfo{Username: username, Groups: groups})
	caller.Provider = name
	caller.Claims = PolicyClaims(claims)
	return caller, nil
}

// Bounds on the claims a Caller keeps for access policies.
const (
	// MaxPolicyClaims bounds how many claims a Caller keeps.
	MaxPolicyClaims = 64
	// MaxPolicyClaimName bounds a kept claim's name, in bytes.
	MaxPolicyClaimName = 128
	// MaxPolicyClaimText bounds a kept string, or each string of a kept list, in bytes.
	MaxPolicyClaimText = 1024
	// MaxPolicyClaimList bounds the strings of a kept list.
	MaxPolicyClaimList = 64
	// MaxPolicyClaimsBytes bounds the names and strings of the kept claims together.
	MaxPolicyClaimsBytes = 16 << 10
)

// PolicyClaims are the claims of a verified token an access policy may judge: each
// claim whose value is a string, a number, a bool or a list of strings, in name order,
// within the bounds above. A claim of another kind (an object, null, a mixed list) or
// beyond a bound is left out whole, never cut: a policy that reads it finds it absent
// (and an expression that reads an absent claim without has() fails, which denies).
// The values are copies; nothing refers to the token.
func PolicyClaims(claims map[string]any) map[string]any {
	out := map[string]any{}
	size := 0
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		if len(out) == MaxPolicyClaims {
			break
		}
		if len(name) > MaxPolicyClaimName {
			continue
		}
		value, n, ok := policyClaim(claims[name])
		if !ok || size+len(name)+n > MaxPolicyClaimsBytes {
			continue
		}
		size += len(name) + n
		out[name] = value
	}
	return out
}

// policyClaim returns v as a Caller keeps it and the bytes of its strings, or false when
// it is not kept.
func policyClaim(v any) (any, int, bool) {
	switch v := v.(type) {
	case string:
		return v, len(v), len(v) <= MaxPolicyClaimText
	case float64, bool:
		return v, 0, true
	case []any:
		if len(v) > MaxPolicyClaimList {
			return nil, 0, false
		}
		list, n := make([]string, 0, len(v)), 0
		for _, item := range v {
			s, ok := item.(string)
			if !ok || len(s) > MaxPolicyClaimText {
				return nil, 0, false
			}
			list, n = append(list, s), n+len(s)
		}
		return list, n, true
	}
	return nil, 0, false
}

// mapGroups maps the groups claim (a string or a list of strings; absent is none).
func (p *provider) mapGroups(claims map[string]any) ([]string, error) {
	name := p.cfg.Name
	if p.cfg.GroupsClaim == "" {
		return nil, nil
	}
	var values []string
	switch v := claims[p.cfg.GroupsClaim].(type) {
	case nil:
	case string:
		values = []string{v}
	case []any:
		if len(v) > maxGroups {
			return nil, refuse(name, ReasonInvalidClaims, "the token's %s claim holds more than %d groups", p.cfg.GroupsClaim, maxGroups)
		}
		for _, g := range v {
			s, ok := g.(string)
			if !ok {
				return nil, refuse(name, ReasonInvalidClaims, "the token's %s claim is not a list of strings", p.cfg.GroupsClaim)
			}
			values = append(values, s)
		}
	default:
		return nil, refuse(name, ReasonInvalidClaims, "the token's %s claim is not a string or a list of strings", p.cfg.GroupsClaim)
	}
	groups := make([]string, 0, len(values))
	for _, v := range values {
		if err := checkName(v); err != nil {
			return nil, refuse(name, ReasonInvalidClaims, "a value of the token's %s claim %v", p.cfg.GroupsClaim, err)
		}
		if v == "" {
			continue
		}
		g := p.cfg.GroupsPrefix + v
		if strings.HasPrefix(g, reservedPrefix) {
			return nil, refuse(name, ReasonReservedName, "a mapped group starts with %q, which Kubernetes reserves", reservedPrefix)
		}
		groups = append(groups, g)
	}
	slices.Sort(groups)
	return slices.Compact(groups), nil
}
