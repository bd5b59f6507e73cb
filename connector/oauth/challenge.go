package oauth

import "strings"

// Challenge is what a Bearer WWW-Authenticate challenge says (RFC 6750, RFC 9728).
type Challenge struct {
	// Error is the error parameter: invalid_token, insufficient_scope, ...
	Error string
	// Scope is the scope parameter: the scopes the resource asks for.
	Scope string
	// ResourceMetadata is the resource_metadata parameter: where the resource's
	// protected resource metadata is (RFC 9728).
	ResourceMetadata string
}

// ParseChallenge reads the first Bearer challenge of WWW-Authenticate header values. It
// reads at most 8 challenges of a value and 16 parameters of a challenge; the first of
// two parameters of one name counts.
func ParseChallenge(values []string) Challenge {
	var ch Challenge
	for _, v := range values {
		for _, c := range splitChallenges(v) {
			if !strings.EqualFold(c.scheme, "Bearer") {
				continue
			}
			ch.Error = c.params["error"]
			ch.Scope = c.params["scope"]
			ch.ResourceMetadata = c.params["resource_metadata"]
			return ch
		}
	}
	return ch
}

type rawChallenge struct {
	scheme string
	params map[string]string
}

// splitChallenges parses one WWW-Authenticate value into its challenges (RFC 9110
// section 11.6.1): a scheme, then comma-separated name=value or name="quoted" params.
func splitChallenges(s string) []rawChallenge {
	var out []rawChallenge
	i := 0
	skip := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == ',') {
			i++
		}
	}
	token := func() string {
		start := i
		for i < len(s) && isTokenChar(s[i]) {
			i++
		}
		return s[start:i]
	}
	for len(out) < 8 {
		skip()
		scheme := token()
		if scheme == "" {
			break
		}
		c := rawChallenge{scheme: scheme, params: map[string]string{}}
		for len(c.params) < 16 {
			skip()
			save := i
			name := token()
			j := i
			for j < len(s) && (s[j] == ' ' || s[j] == '\t') {
				j++
			}
			if name == "" {
				if i >= len(s) || s[i] == '"' || s[i] == '=' {
					// A token68 or stray text: skip to the next comma.
					for i < len(s) && s[i] != ',' {
						i++
					}
					if i < len(s) {
						continue
					}
				}
				break
			}
			if j >= len(s) || s[j] != '=' || (j+1 < len(s) && s[j+1] == '=') {
				i = save // the next challenge's scheme, or a token68
				if j < len(s) && s[j] == '=' {
					for i < len(s) && s[i] != ',' {
						i++
					}
					continue
				}
				break
			}
			i = j + 1
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			var value strings.Builder
			if i < len(s) && s[i] == '"' {
				i++
				for i < len(s) && s[i] != '"' {
					if s[i] == '\\' && i+1 < len(s) {
						i++
					}
					value.WriteByte(s[i])
					i++
				}
				if i < len(s) {
					i++ // the closing quote
				}
			} else {
				value.WriteString(token())
			}
			key := strings.ToLower(name)
			if _, dup := c.params[key]; !dup {
				c.params[key] = value.String()
			}
		}
		out = append(out, c)
		if i >= len(s) {
			break
		}
	}
	return out
}

func isTokenChar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~/", b) >= 0
}
