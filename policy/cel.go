package policy

import (
	"fmt"
	"strings"
	"sync"
	"unique"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/util/version"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

// Cost limits, those of a ValidatingAdmissionPolicy (k8s.io/apiserver/pkg/apis/cel).
const (
	// perCallLimit bounds the work of one evaluation of one `when`; the CEL environment
	// applies it (celconfig.PerCallLimit).
	perCallLimit = 1_000_000
	// policyBudget bounds the work of all the evaluations of one policy for one request
	// (celconfig.RuntimeCELCostBudget, the budget of one policy binding).
	policyBudget = 10_000_000
	// estimatedCostLimit bounds the worst-case cost CEL estimates for one expression at
	// compile time. The API server refuses a CRD rule whose estimate exceeds 10,000,000
	// on objects its schema bounds; a call's arguments are bounded by no schema, only by
	// the size of a message, so the estimate assumes the largest message, and refuses
	// what could cost more than a hundred times the per-call limit on it. Only
	// expressions that grow faster than the request (a comprehension nested in another
	// over the arguments, a regular expression matched against every element of a list)
	// ever do; linear ones are stopped at run time by the per-call limit.
	estimatedCostLimit = 100 * perCallLimit
	// maxRequestBytes is the size the estimate assumes for every list, map and string
	// whose size CEL cannot tell: the gateway's default limit on one message.
	maxRequestBytes = 4 << 20
	// checkFrequency is how many comprehension iterations run between checks of the
	// evaluation's deadline (celconfig.CheckFrequency).
	checkFrequency = 100
	// maxGroups is the number of groups the estimate assumes a caller has at most, the
	// bound identity enforces on a token's groups.
	maxGroups = 1024
)

// The CEL variables a `when` sees.
const (
	varCaller    = "caller"
	varTool      = "tool"
	varArguments = "arguments"
	varMethod    = "method"
	varResource  = "resource"
	varPrompt    = "prompt"
	varTarget    = "target"
)

// celEnv is the environment every `when` compiles in: Kubernetes' CEL libraries and
// cost model, as a ValidatingAdmissionPolicy's expressions have them, plus typed
// variables, so that a misspelt field (caller.usrname) is refused at compile time.
// At run time the variables are plain maps.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	field := func(name string, t *apiservercel.DeclType) *apiservercel.DeclField {
		return apiservercel.NewDeclField(name, t, true, nil, nil)
	}
	object := func(name string, fields ...*apiservercel.DeclField) *apiservercel.DeclType {
		m := make(map[string]*apiservercel.DeclField, len(fields))
		for _, f := range fields {
			m[f.Name] = f
		}
		return apiservercel.NewObjectType(name, m)
	}
	str := apiservercel.StringType
	boolean := apiservercel.BoolType
	callerType := object("policy.Caller",
		field("username", str),
		field("uid", str),
		field("groups", apiservercel.NewListType(str, maxGroups)),
		field("extra", apiservercel.NewMapType(str, apiservercel.NewListType(str, -1), -1)),
		field("claims", apiservercel.NewMapType(str, apiservercel.DynType, -1)),
	)
	annotationsType := object("policy.ToolAnnotations",
		field("title", str),
		field("readOnlyHint", boolean),
		field("destructiveHint", boolean),
		field("idempotentHint", boolean),
		field("openWorldHint", boolean),
	)
	toolType := object("policy.Tool", field("name", str), field("annotations", annotationsType))
	resourceType := object("policy.Resource", field("uri", str))
	promptType := object("policy.Prompt", field("name", str))
	targetType := object("policy.Target", field("kind", str), field("namespace", str), field("name", str))
	argumentsType := apiservercel.NewMapType(str, apiservercel.DynType, -1)

	set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions: []cel.EnvOption{
			cel.Variable(varCaller, callerType.CelType()),
			cel.Variable(varTool, toolType.CelType()),
			cel.Variable(varArguments, argumentsType.CelType()),
			cel.Variable(varMethod, cel.StringType),
			cel.Variable(varResource, resourceType.CelType()),
			cel.Variable(varPrompt, promptType.CelType()),
			cel.Variable(varTarget, targetType.CelType()),
		},
		DeclTypes: []*apiservercel.DeclType{callerType, annotationsType, toolType, resourceType, promptType, targetType, argumentsType},
	})
	if err != nil {
		return nil, err
	}
	return set.Env(environment.StoredExpressions)
})

// condition is a compiled `when`.
type condition struct {
	// source is the expression, interned: one Decide evaluates each distinct condition
	// once, and finds it by this handle.
	source unique.Handle[string]
	// program evaluates the condition with CEL's cost tracking: it stops at the
	// per-call limit and says what the evaluation cost, for the policy's budget.
	program cel.Program
	// loops is true when the condition holds a comprehension, the one kind of
	// expression whose time its cost does not bound well; it then runs with a deadline.
	loops bool
	// bounded, when set, evaluates the condition without cost tracking (which costs
	// more than evaluating most conditions); bound is the most an evaluation can cost,
	// on any request (see provenBound). A policy whose conditions are all bounded, and
	// together within its budget, evaluates them this way (Compiled.untracked): no
	// evaluation can reach a limit, so tracking could change no verdict.
	bounded interpreter.InterpretableV2
	bound   uint64
	// guards are the arguments a bounded condition tests for at its top: it is a
	// conjunction, one of whose terms is has(arguments.K), or a disjunction, one of whose
	// terms is !has(arguments.K), for each key K of guards. When the call has no
	// argument K, CEL's logic decides the condition whatever its other terms give
	// (false && anything is false, true || anything is true, errors included): it is
	// guardless then, and evaluating it would give the same.
	guards    []string
	guardless bool
}

// compileCondition compiles rule i's condition, checks that it is a bool and that its
// estimated worst-case cost is within the limit, and prepares its evaluations.
func compileCondition(env *cel.Env, i int, expr string) (*condition, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, &ExpressionError{Rule: i, Problem: "does not compile: " + oneLine(iss.Err().Error())}
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, &ExpressionError{Rule: i, Problem: fmt.Sprintf("evaluates to %s; it must evaluate to a bool (true or false)", t)}
	}
	est, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: sizeEstimator{}})
	if err != nil {
		return nil, &ExpressionError{Rule: i, Problem: "has a cost that cannot be estimated: " + oneLine(err.Error())}
	}
	if est.Max > estimatedCostLimit {
		return nil, &ExpressionError{Rule: i, Problem: fmt.Sprintf(
			"may cost up to %d on the largest request, more than the %d an expression may spend; iterate over fewer elements or bound them first", est.Max, estimatedCostLimit)}
	}
	prg, err := env.Program(ast, cel.InterruptCheckFrequency(checkFrequency))
	if err != nil {
		return nil, &ExpressionError{Rule: i, Problem: "cannot be prepared: " + oneLine(err.Error())}
	}
	c := &condition{source: unique.Make(expr), program: prg,
		loops: len(celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.ComprehensionKind))) > 0}
	if bound, ok := provenBound(env, ast); ok {
		if bounded, err := planUntracked(ast); err == nil {
			c.bounded, c.bound = bounded, bound
			c.guards, c.guardless = argumentGuards(ast.NativeRep().Expr())
		}
	}
	return c, nil
}

// oneLine joins CEL's multi-line messages (error, source line, caret) into one line for
// a status condition.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " | ")), " ")
}

// sizeEstimator bounds the sizes of values for the cost estimate: a caller's groups by
// maxGroups, and every other list, map and string whose size CEL cannot tell by the
// largest request the API server accepts.
type sizeEstimator struct{}

// EstimateSize implements checker.CostEstimator.
func (sizeEstimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) == 2 && path[0] == varCaller && path[1] == "groups" {
		return &checker.SizeEstimate{Min: 0, Max: maxGroups}
	}
	return &checker.SizeEstimate{Min: 0, Max: maxRequestBytes}
}

// EstimateCallCost implements checker.CostEstimator: library.CostEstimator prices the
// calls.
func (sizeEstimator) EstimateCallCost(_, _ string, _ *checker.AstNode, _ []checker.AstNode) *checker.CallEstimate {
	return nil
}

// unknownSizes tells the cost estimate no size: every list, map and string may be as
// large as it can be.
type unknownSizes struct{}

// EstimateSize implements checker.CostEstimator.
func (unknownSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

// EstimateCallCost implements checker.CostEstimator: library.CostEstimator prices the
// calls.
func (unknownSizes) EstimateCallCost(_, _ string, _ *checker.AstNode, _ []checker.AstNode) *checker.CallEstimate {
	return nil
}
