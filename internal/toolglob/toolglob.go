// Package toolglob matches tool names against the allow and deny globs of an MCPServer's
// and an MCPToolset's spec.tools. It is the one matcher for everything that applies
// those globs: the status the controller publishes (and the catalogue serves), the
// gateway's tools/list and tools/call, the toolsets' exposed names, and the tool, prompt
// and resource globs of MCPAccessPolicy rules (policy).
//
// A glob is what admission accepts: 1 to 128 characters out of letters, digits, '_',
// '.', '-', '*' and '?'. `*` matches any run of characters, '/' and the empty run
// included; `?` matches exactly one character (one UTF-8 encoded rune, or one byte that
// is not valid UTF-8); every other character matches itself. There are no character
// classes and no escapes, as admission allows neither '[' nor '\'.
package toolglob

import (
	"fmt"
	"unicode/utf8"
)

// Pattern is the regular expression admission checks every glob against (the CEL rule on
// spec.tools.allow and spec.tools.deny), and MaxLength the longest glob it admits.
const (
	Pattern   = `^[A-Za-z0-9_.*?-]+$`
	MaxLength = 128
)

// Valid returns an error saying why glob is not one admission accepts, or nil.
func Valid(glob string) error {
	switch {
	case glob == "":
		return fmt.Errorf("empty glob")
	case len(glob) > MaxLength:
		return fmt.Errorf("glob longer than %d characters", MaxLength)
	}
	for i := 0; i < len(glob); i++ {
		if !globByte(glob[i]) {
			r, _ := utf8.DecodeRuneInString(glob[i:])
			return fmt.Errorf("glob %q contains %q: globs may contain only letters, digits, '_', '.', '-', '*' and '?'", glob, r)
		}
	}
	return nil
}

func globByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '.' || c == '-' || c == '*' || c == '?'
}

// Match reports whether name matches glob. It returns an error, and false, when glob is
// not valid (see Valid): a caller applying a deny list must treat that as a match.
func Match(glob, name string) (bool, error) {
	if err := Valid(glob); err != nil {
		return false, err
	}
	return match(glob, name), nil
}

// MatchAny reports whether name matches glob with the same matcher as Match, for globs
// whose characters admission checks with another rule than tool names (the resource URI
// globs of an MCPAccessPolicy): '*' and '?' are wildcards, every other character matches
// itself.
func MatchAny(glob, name string) bool {
	return match(glob, name)
}

// match is the classic wildcard match that remembers only the last star: when a later
// part fails, that star takes one more character and matching resumes after it. Earlier
// stars never need to be revisited, so it takes at most len(glob)*len(name) steps and
// allocates nothing. glob's literals are ASCII, so comparing bytes compares characters.
func match(glob, name string) bool {
	gi, ni := 0, 0
	// starGi is the index in glob after the last star seen, starNi where in name that
	// star's run would end if it took one more character; -1 before any star.
	starGi, starNi := -1, -1
	for gi < len(glob) || ni < len(name) {
		if gi < len(glob) {
			switch c := glob[gi]; c {
			case '*':
				gi++
				starGi, starNi = gi, ni
				continue
			case '?':
				if ni < len(name) {
					_, w := utf8.DecodeRuneInString(name[ni:])
					gi++
					ni += w
					continue
				}
			default:
				if ni < len(name) && name[ni] == c {
					gi++
					ni++
					continue
				}
			}
		}
		if starGi >= 0 && starNi < len(name) {
			_, w := utf8.DecodeRuneInString(name[starNi:])
			starNi += w
			gi, ni = starGi, starNi
			continue
		}
		return false
	}
	return true
}

// Verdict is the outcome of checking a name against an allow and a deny list.
type Verdict struct {
	// Allowed is true when the name matches an allow glob (or allow is empty) and no
	// deny glob.
	Allowed bool
	// Deny is the deny glob that refused the name; empty when none did (the name is
	// allowed, or matches no allow glob).
	Deny string
	// Invalid says why Deny is not a valid glob: a deny glob that cannot be evaluated
	// refuses every name. Nil when Deny matched the name.
	Invalid error
}

// Check checks name against allow and deny; deny wins. It fails closed: a deny glob that
// is not valid refuses every name, and an allow glob that is not valid allows none.
func Check(allow, deny []string, name string) Verdict {
	for _, g := range deny {
		ok, err := Match(g, name)
		if ok || err != nil {
			return Verdict{Deny: g, Invalid: err}
		}
	}
	if len(allow) == 0 {
		return Verdict{Allowed: true}
	}
	for _, g := range allow {
		if ok, _ := Match(g, name); ok {
			return Verdict{Allowed: true}
		}
	}
	return Verdict{}
}

// Allowed reports whether name passes allow and deny, as Check decides.
func Allowed(allow, deny []string, name string) bool {
	return Check(allow, deny, name).Allowed
}
