package policy

import (
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"
)

// Most conditions are simple tests of the request (a field equals a value, an argument is
// there or starts with a prefix), whose cost does not grow with the request. Those are
// evaluated without CEL's cost tracking, which costs more than they do; this file finds
// them (provenBound), prepares their evaluation (planUntracked) and the arguments whose
// absence decides them (argumentGuards).

// provenBound returns the most an evaluation of ast can cost, and true, when CEL's cost
// estimate proves it within the per-call limit whatever the request: the estimate knows
// the size of no list, map or string (where compileCondition's assumes the largest
// request), so only a cost that does not grow with the request is bounded. Conditions
// that call a function outside untrackedFunctions, or hold a comprehension, are never
// bounded.
//
// The estimate prices an attribute (arguments.a.b.c) once where an evaluation charges
// each of its qualifiers: the bound adds nodeMargin for every node of the expression.
func provenBound(env *cel.Env, ast *cel.Ast) (uint64, bool) {
	nav := celast.NavigateAST(ast.NativeRep())
	if len(celast.MatchDescendants(nav, celast.KindMatcher(celast.ComprehensionKind))) > 0 {
		return 0, false
	}
	for _, call := range celast.MatchDescendants(nav, celast.KindMatcher(celast.CallKind)) {
		if !untrackedFunctions[call.AsCall().FunctionName()] {
			return 0, false
		}
	}
	est, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: unknownSizes{}})
	if err != nil || est.Max > perCallLimit {
		return 0, false
	}
	nodes := len(celast.MatchDescendants(nav, func(celast.NavigableExpr) bool { return true }))
	bound := est.Max + uint64(nodes)*nodeMargin
	return bound, bound <= perCallLimit
}

// nodeMargin is what provenBound adds to the estimate for every node of an expression.
const nodeMargin = 10

// untrackedFunctions are the functions a condition evaluated without cost tracking may
// call: CEL's operators, conversions and string tests, which the environment's
// libraries evaluate with their function bindings alone. A library may also change how
// its functions are planned (the optional library's `or` and `orValue`, the regular
// expression optimizations); a condition calling anything not listed here is evaluated
// by its cel.Program, as the environment prepares it.
var untrackedFunctions = map[string]bool{
	operators.LogicalAnd: true, operators.LogicalOr: true, operators.LogicalNot: true, operators.Conditional: true,
	operators.Equals: true, operators.NotEquals: true, operators.Less: true, operators.LessEquals: true,
	operators.Greater: true, operators.GreaterEquals: true, operators.In: true, operators.Index: true,
	operators.Add: true, operators.Subtract: true, operators.Multiply: true, operators.Divide: true,
	operators.Modulo: true, operators.Negate: true,
	overloads.Size: true, overloads.StartsWith: true, overloads.EndsWith: true, overloads.Contains: true,
	overloads.TypeConvertBool: true, overloads.TypeConvertInt: true, overloads.TypeConvertUint: true,
	overloads.TypeConvertDouble: true, overloads.TypeConvertString: true, overloads.TypeConvertDyn: true,
	overloads.TypeConvertType: true,
}

// planUntracked plans ast for an evaluation without cost tracking. cel-go offers no
// option that turns off the cost tracking the Kubernetes environment sets for every
// program, so the plan is made as cel.Env.Program makes it, with the environment's
// function bindings and types, and the constant folding the environment asks for
// (cel.OptOptimize; its regular expression optimizations concern functions
// untrackedFunctions leaves out), without the cost observer.
func planUntracked(ast *cel.Ast) (interpreter.InterpretableV2, error) {
	interp, err := untrackedInterpreter()
	if err != nil {
		return nil, err
	}
	return interp.NewInterpretable(ast.NativeRep(), interpreter.Optimize())
}

// untrackedInterpreter is the interpreter of planUntracked, built once from celEnv.
var untrackedInterpreter = sync.OnceValues(func() (interpreter.Interpreter, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	dispatcher := interpreter.NewDispatcher()
	for _, fn := range env.Functions() {
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, err
		}
		if err := dispatcher.Add(bindings...); err != nil {
			return nil, err
		}
	}
	attributes := interpreter.NewAttributeFactory(env.Container, env.CELTypeAdapter(), env.CELTypeProvider())
	return interpreter.NewInterpreter(dispatcher, env.Container, env.CELTypeProvider(), env.CELTypeAdapter(), attributes), nil
})

// argumentGuards returns the guards of the condition e (see condition) and what e is
// when one of them fails: false for a conjunction, true for a disjunction.
func argumentGuards(e celast.Expr) ([]string, bool) {
	var keys []string
	if terms := operands(e, operators.LogicalAnd, nil); len(terms) > 0 {
		for _, t := range terms {
			if k, ok := hasArgument(t); ok {
				keys = append(keys, k)
			}
		}
		return keys, false
	}
	for _, t := range operands(e, operators.LogicalOr, nil) {
		if t.Kind() == celast.CallKind && t.AsCall().FunctionName() == operators.LogicalNot && len(t.AsCall().Args()) == 1 {
			if k, ok := hasArgument(t.AsCall().Args()[0]); ok {
				keys = append(keys, k)
			}
		}
	}
	return keys, true
}

// operands appends to terms the operands of e when e is a chain of calls of the logical
// operator op (a && b && c), and nothing when e is not such a call.
func operands(e celast.Expr, op string, terms []celast.Expr) []celast.Expr {
	if e.Kind() != celast.CallKind || e.AsCall().FunctionName() != op || len(e.AsCall().Args()) != 2 {
		return terms
	}
	for _, a := range e.AsCall().Args() {
		if a.Kind() == celast.CallKind && a.AsCall().FunctionName() == op {
			terms = operands(a, op, terms)
		} else {
			terms = append(terms, a)
		}
	}
	return terms
}

// hasArgument returns K when e is has(arguments.K).
func hasArgument(e celast.Expr) (string, bool) {
	if e.Kind() != celast.SelectKind {
		return "", false
	}
	sel := e.AsSelect()
	if !sel.IsTestOnly() || sel.Operand().Kind() != celast.IdentKind || sel.Operand().AsIdent() != varArguments {
		return "", false
	}
	return sel.FieldName(), true
}
