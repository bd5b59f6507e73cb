package connector

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// redactedText replaces a secret wherever the connector finds one.
const redactedText = "[redacted]"

// secretList is an immutable list of secrets: as text, longest first, for redacting
// strings; and as the bytes worth searching a message for, to tell cheaply whether it
// holds any secret at all.
type secretList struct {
	text []string
	// probes are the secrets that contain no other secret of the list: a text without
	// any of them holds none of the rest ("Bearer t" cannot be where "t" is not).
	probes []probe
	// replacementChar is set when a secret contains U+FFFD, which a JSON decoder makes
	// of invalid UTF-8: raw bytes that are not UTF-8 may then decode to a secret.
	replacementChar bool
	// escapable is set when a secret contains a character that a two-character escape
	// stands for (a quote, a backslash, a control character), slash when one contains
	// a slash (\/): a message with such escapes must be decoded to be searched.
	escapable, slash bool
}

// newSecretList returns the list of secrets, longest first.
func newSecretList(secrets []string) secretList {
	text := append([]string(nil), secrets...)
	// Longest first, so a value that contains another is redacted whole.
	slices.SortStableFunc(text, func(a, b string) int { return len(b) - len(a) })
	l := secretList{text: text}
	for i, s := range text {
		minimal := true
		for j, other := range text {
			if j != i && len(other) < len(s) && strings.Contains(s, other) {
				minimal = false
				break
			}
			// Of two equal secrets, the first is the probe.
			if j < i && other == s {
				minimal = false
				break
			}
		}
		if minimal {
			l.probes = append(l.probes, newProbe(s))
		}
		if strings.ContainsRune(s, utf8.RuneError) {
			l.replacementChar = true
		}
		if strings.ContainsAny(s, `"\`) || strings.ContainsFunc(s, unicode.IsControl) {
			l.escapable = true
		}
		if strings.Contains(s, "/") {
			l.slash = true
		}
	}
	return l
}

// foundIn reports whether text holds any secret of the list.
func (l *secretList) foundIn(text []byte) bool {
	for _, p := range l.probes {
		if p.foundIn(text) {
			return true
		}
	}
	return false
}

// probe searches a text for one secret. bytes.Index looks for the first byte of what it
// is given and compares from there: searching from a byte that is rare in messages (not
// a lower-case letter, a space or JSON punctuation) tries far fewer places than from the
// first byte of "Bearer ..." or of a JWT's "eyJ...".
type probe struct {
	secret []byte
	// anchor is where in secret the search starts.
	anchor int
}

func newProbe(secret string) probe {
	p := probe{secret: []byte(secret)}
	for k := 0; k+8 <= len(secret); k++ {
		if c := secret[k]; ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || strings.IndexByte("-_.~+/=!#$%&*?@^|", c) >= 0 {
			p.anchor = k
			break
		}
	}
	return p
}

// foundIn reports whether text holds the secret.
func (p probe) foundIn(text []byte) bool {
	head, tail := p.secret[:p.anchor], p.secret[p.anchor:]
	for from := p.anchor; from <= len(text)-len(tail); {
		i := bytes.Index(text[from:], tail)
		if i < 0 {
			return false
		}
		at := from + i
		if bytes.Equal(text[at-p.anchor:at], head) {
			return true
		}
		from = at + 1
	}
	return false
}

// replace replaces every secret of the list in s.
func (l *secretList) replace(s string) string {
	for _, secret := range l.text {
		s = strings.ReplaceAll(s, secret, redactedText)
	}
	return s
}

// scrubMessage returns msg without any of the server's secrets, configured or issued,
// in anything a client decodes from it: the method, the id, params and result (keys and
// string values in any JSON spelling, numbers), the error's message and data. A message
// that holds none is returned as it is, not copied; one that does is copied with only
// the strings (and numbers) that held a secret rewritten, still valid JSON.
func (r redactor) scrubMessage(msg jsonrpc.Message) jsonrpc.Message {
	lists := r.lists()
	if len(lists[0].text) == 0 && len(lists[1].text) == 0 {
		return msg
	}
	switch m := msg.(type) {
	case *jsonrpc.Request:
		params, scrubbed := scrubJSON(m.Params, lists)
		method := redactAll(m.Method, lists)
		id, newID := scrubID(m.ID, lists)
		if !scrubbed && !newID && method == m.Method {
			return msg
		}
		out := *m
		out.Method, out.ID, out.Params = method, id, params
		return &out
	case *jsonrpc.Response:
		result, scrubbed := scrubJSON(m.Result, lists)
		id, newID := scrubID(m.ID, lists)
		newErr, rpcErr := scrubRPCError(m.Error, lists)
		if !scrubbed && !newID && !newErr {
			return msg
		}
		out := *m
		out.Result, out.ID, out.Error = result, id, rpcErr
		return &out
	}
	return msg
}

// lists returns the configured and the issued secrets.
func (r redactor) lists() [2]*secretList {
	configured, issued := r.configured, &noSecrets
	if configured == nil {
		configured = &noSecrets
	}
	if r.issued != nil {
		issued = r.issued()
	}
	return [2]*secretList{configured, issued}
}

// noSecrets is the empty list.
var noSecrets secretList

// redactAll replaces every secret of lists in s.
func redactAll(s string, lists [2]*secretList) string {
	for _, l := range lists {
		s = l.replace(s)
	}
	return s
}

// scrubID returns id with any secret in it redacted; a client answers a server request
// whose id held one with an id the server does not know, which is the server's loss.
func scrubID(id jsonrpc.ID, lists [2]*secretList) (jsonrpc.ID, bool) {
	var text string
	switch v := id.Raw().(type) {
	case string:
		text = v
	case int64:
		var buf [20]byte
		digits := strconv.AppendInt(buf[:0], v, 10)
		if !lists[0].foundIn(digits) && !lists[1].foundIn(digits) {
			return id, false // without formatting a string for every response
		}
		text = string(digits)
	default:
		return id, false
	}
	red := redactAll(text, lists)
	if red == text {
		return id, false
	}
	out, err := jsonrpc.MakeID(red)
	if err != nil {
		return id, false // a string always makes an ID
	}
	return out, true
}

// scrubRPCError returns a response's error with any secret taken out of its message and
// data. An error of another type than *jsonrpc.Error, which is sent as its text, is
// replaced by a *jsonrpc.Error of the scrubbed text.
func scrubRPCError(err error, lists [2]*secretList) (scrubbed bool, _ error) {
	if err == nil {
		return false, nil
	}
	we, ok := errors.AsType[*jsonrpc.Error](err)
	if !ok {
		text := err.Error()
		if red := redactAll(text, lists); red != text {
			return true, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: red}
		}
		return false, err
	}
	message := redactAll(we.Message, lists)
	data, dataScrubbed := scrubJSON(we.Data, lists)
	if !dataScrubbed && message == we.Message {
		return false, err
	}
	return true, &jsonrpc.Error{Code: we.Code, Message: message, Data: data}
}

// unescapeBuffers hold the decoded text of messages while they are searched.
var unescapeBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBuffer bounds the buffers kept for reuse: one huge message must not pin its
// size in memory.
const maxPooledBuffer = 64 << 10

// scrubJSON returns raw, a valid JSON value, with every secret of lists taken out of
// what a decoder makes of it, and whether it changed anything. Most messages hold no
// secret, and are told apart with one search of their bytes, or, when an escape could
// hide one, of their bytes with every escape decoded; only a message that may hold one
// is walked string by string (see rewriteJSON).
func scrubJSON(raw json.RawMessage, lists [2]*secretList) (json.RawMessage, bool) {
	if len(raw) == 0 {
		return raw, false
	}
	suspect := false
	for _, l := range lists {
		suspect = suspect || (l.replacementChar && !utf8.Valid(raw))
	}
	if !suspect {
		text := []byte(raw)
		var buf *[]byte
		if mayHide(raw, lists) {
			// Outside strings valid JSON has no backslash, so decoding every escape of
			// the whole text decodes every string in place: a secret some string decodes
			// to is in the result. (A match across two strings only costs the walk.)
			buf = unescapeBuffers.Get().(*[]byte)
			*buf = unescapeAll((*buf)[:0], raw)
			text = *buf
		}
		suspect = lists[0].foundIn(text) || lists[1].foundIn(text)
		if buf != nil {
			if cap(*buf) <= maxPooledBuffer {
				unescapeBuffers.Put(buf)
			}
		}
	}
	if !suspect {
		return raw, false
	}
	return rewriteJSON(raw, lists)
}

// mayHide reports whether an escape in raw may spell part of a secret of lists, so that
// raw must be decoded to be searched. Escapes other than \uXXXX stand for a quote, a
// backslash, a slash or a control character: where no secret has such a character, a
// secret in a decoded string is spelled out in raw as it is, unless raw has \u escapes
// (which may spell any character).
func mayHide(raw []byte, lists [2]*secretList) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	if lists[0].escapable || lists[1].escapable || bytes.Contains(raw, []byte(`\u`)) {
		return true
	}
	return (lists[0].slash || lists[1].slash) && bytes.Contains(raw, []byte(`\/`))
}

// rewriteJSON replaces, in raw, every string token whose decoded value holds a secret by
// the encoding of its redacted value, and every number token that spells one by the
// redacted text as a string; the rest of raw is kept byte for byte. Every replacement is
// a whole token for a whole JSON string, so valid JSON stays valid. The literals true,
// false and null say nothing of a secret and are kept.
func rewriteJSON(raw json.RawMessage, lists [2]*secretList) (json.RawMessage, bool) {
	var out []byte
	last := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		var end int
		switch {
		case c == '"':
			end = stringEnd(raw, i)
			var s string
			if json.Unmarshal(raw[i:end], &s) != nil {
				break // not a string token: keep it
			}
			if red := redactAll(s, lists); red != s {
				out = appendReplacement(out, raw[last:i], red)
				last = end
			}
		case c == '-' || ('0' <= c && c <= '9'):
			end = i + 1
			for end < len(raw) && strings.IndexByte("0123456789+-.eE", raw[end]) >= 0 {
				end++
			}
			if num := string(raw[i:end]); redactAll(num, lists) != num {
				out = appendReplacement(out, raw[last:i], redactAll(num, lists))
				last = end
			}
		default:
			end = i + 1
		}
		i = end
	}
	if out == nil {
		return raw, false
	}
	return append(out, raw[last:]...), true
}

// appendReplacement appends kept and then s as a JSON string.
func appendReplacement(out, kept []byte, s string) []byte {
	out = append(out, kept...)
	enc, _ := json.Marshal(s) // a string always encodes
	return append(out, enc...)
}

// stringEnd returns the index after the string token that starts at raw[i], a quote,
// or len(raw) when it does not end.
func stringEnd(raw []byte, i int) int {
	for j := i + 1; j < len(raw); j++ {
		switch raw[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(raw)
}

// unescapeAll appends raw to dst with every JSON escape decoded as a JSON decoder
// decodes it (a lone surrogate becomes U+FFFD); a malformed escape is copied as it is.
func unescapeAll(dst, raw []byte) []byte {
	for {
		k := bytes.IndexByte(raw, '\\')
		if k < 0 || k+1 >= len(raw) {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:k]...)
		raw = raw[k:]
		switch c := raw[1]; c {
		case '"', '\\', '/':
			dst = append(dst, c)
			raw = raw[2:]
		case 'b':
			dst, raw = append(dst, '\b'), raw[2:]
		case 'f':
			dst, raw = append(dst, '\f'), raw[2:]
		case 'n':
			dst, raw = append(dst, '\n'), raw[2:]
		case 'r':
			dst, raw = append(dst, '\r'), raw[2:]
		case 't':
			dst, raw = append(dst, '\t'), raw[2:]
		case 'u':
			r, ok := hex4(raw[2:])
			if !ok {
				dst, raw = append(dst, raw[:2]...), raw[2:]
				continue
			}
			raw = raw[6:]
			if utf16.IsSurrogate(r) {
				r2, ok := rune(-1), false
				if len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
					r2, ok = hex4(raw[2:])
				}
				if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
					r = dec
					raw = raw[6:]
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			dst, raw = append(dst, raw[:2]...), raw[2:]
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// recentSecrets remembers the last few secrets minted or received at run time (tokens,
// assertions, a caller's token) for redaction. Every addition makes a new list, so that
// a redactor reading it never waits.
type recentSecrets struct {
	mu    sync.Mutex
	items []string // oldest first
	list  atomic.Pointer[secretList]
}

// add remembers secret, forgetting the oldest beyond max. Values shorter than 8 bytes
// are no credentials and would mangle messages.
func (r *recentSecrets) add(secret string, max int) {
	if len(secret) < 8 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.Contains(r.items, secret) {
		return
	}
	if len(r.items) == max {
		r.items = r.items[1:]
	}
	r.items = append(r.items, secret)
	l := newSecretList(r.items)
	r.list.Store(&l)
}

// get returns the secrets remembered, for the redactor.
func (r *recentSecrets) get() *secretList {
	if l := r.list.Load(); l != nil {
		return l
	}
	return &noSecrets
}
