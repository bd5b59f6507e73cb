package policy

import (
	"strings"
	"unique"

	"github.com/switchboard-mcp/switchboard/internal/toolglob"
)

// glob is one glob of a rule, compiled once: the shapes nearly every rule uses (a name,
// a prefix, a suffix, a substring, everything) are matched with one comparison; any
// other is matched by toolglob, the one matcher of globs. Every shape matches exactly the
// names toolglob.MatchAny matches (FuzzGlobMatchesAsToolglob).
type glob struct {
	pattern string
	// invalid is true for a tool or prompt glob admission would have refused (an old
	// object, or one written around the CRD's validation): it matches every name in a
	// Deny rule, so that it never opens what it closes, and none in another rule.
	invalid bool
	shape   globShape
	// literal is the pattern without its stars, for every shape but globGeneral; interned,
	// as the same globs recur in many rules and policies.
	literal unique.Handle[string]
}

// globShape is the form of a glob that decides how it is matched.
type globShape uint8

const (
	// globGeneral is matched by toolglob.
	globGeneral globShape = iota
	// globExact has no wildcard: the name is the literal.
	globExact
	// globEverything is only stars.
	globEverything
	// globPrefix is a literal then stars: the name starts with the literal.
	globPrefix
	// globSuffix is stars then a literal: the name ends with the literal.
	globSuffix
	// globContains is stars, a literal, stars: the name holds the literal.
	globContains
)

// compileGlob compiles pattern; names is true for tool and prompt globs, whose alphabet
// admission checks (toolglob.Valid).
func compileGlob(pattern string, names bool) glob {
	g := glob{pattern: pattern, invalid: pattern == "" || (names && toolglob.Valid(pattern) != nil)}
	if g.invalid || strings.ContainsRune(pattern, '?') {
		return g
	}
	body := strings.TrimLeft(pattern, "*")
	leading := len(body) < len(pattern)
	literal := strings.TrimRight(body, "*")
	trailing := len(literal) < len(body)
	switch {
	case strings.Contains(literal, "*"):
		// Stars within the literal: toolglob's matcher.
	case literal == "":
		g.shape = globEverything
	case !leading && !trailing:
		g.shape, g.literal = globExact, unique.Make(literal)
	case !leading:
		g.shape, g.literal = globPrefix, unique.Make(literal)
	case literal[0] < 0x80:
		// A star takes whole UTF-8 characters (toolglob), so a literal that starts with
		// an ASCII byte, never part of a longer character, may start at any byte of the
		// name that matches it; a literal that starts otherwise is left to toolglob.
		if trailing {
			g.shape, g.literal = globContains, unique.Make(literal)
		} else {
			g.shape, g.literal = globSuffix, unique.Make(literal)
		}
	}
	return g
}

// matches reports whether name matches the glob (an invalid one matches nothing here;
// the rule decides what an invalid glob means).
func (g *glob) matches(name string) bool {
	switch g.shape {
	case globExact:
		return name == g.literal.Value()
	case globEverything:
		return true
	case globPrefix:
		return strings.HasPrefix(name, g.literal.Value())
	case globSuffix:
		return strings.HasSuffix(name, g.literal.Value())
	case globContains:
		return strings.Contains(name, g.literal.Value())
	}
	return !g.invalid && toolglob.MatchAny(g.pattern, name)
}
