package mcpmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// MaxDepth bounds how deeply a message may nest, as go-sdk's own decoder does.
const MaxDepth = 1000

// ErrInvalid is wrapped by every error of this package: the message is not one a front
// door may judge, and is answered with JSON-RPC's Invalid Request.
var ErrInvalid = errors.New("invalid JSON-RPC message")

// Body is what a POST body carries: one message, or a batch of them.
type Body struct {
	// Batch is true for a JSON array of messages, which MCP allowed before 2025-06-18.
	Batch bool
	// Messages are the body's messages in order; never empty.
	Messages []Message
}

// Message is the envelope of one JSON-RPC message, strictly decoded.
type Message struct {
	// Method is the method of a request or notification; empty for a response.
	Method string
	// ID is the request's or response's id; invalid (the zero ID) for a notification.
	ID jsonrpc.ID
	// Params are the message's params exactly as they appear in the body, their
	// decisive members checked; nil when absent.
	Params json.RawMessage
}

// IsCall reports whether the message is a request that expects an answer.
func (m *Message) IsCall() bool { return m.Method != "" && m.ID.IsValid() }

// envelopeMembers are the members of a JSON-RPC message a front door decides on.
var envelopeMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// paramsMembers are the members of params a front door decides on.
var paramsMembers = []string{"name", "arguments", "cursor", "uri", "_meta"}

// metaMembers are the members of params._meta a front door decides on.
var metaMembers = []string{"progressToken"}

// traceMembers are the members of params._meta read for tracing alone (SEP-414): kept
// when spelled exactly, never refused in another spelling.
var traceMembers = []string{"traceparent", "tracestate", "baggage"}

// CheckBody judges a POST body from an MCP client: one JSON-RPC message (an object) or a
// non-empty batch (an array of objects), checked as the package documentation says. Two
// calls of one batch may not share an id: their answers could not be told apart.
func CheckBody(body []byte) (*Body, error) {
	if err := Check(body); err != nil {
		return nil, err
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: the body is empty", ErrInvalid)
	}
	if trimmed[0] != '[' {
		m, err := decodeEnvelope(body)
		if err != nil {
			return nil, err
		}
		return &Body{Messages: []Message{m}}, nil
	}
	var elements []jsontext.Value
	if err := eachElement(body, func(v jsontext.Value) error {
		elements = append(elements, v)
		return nil
	}); err != nil {
		return nil, err
	}
	if len(elements) == 0 {
		return nil, fmt.Errorf("%w: an empty batch", ErrInvalid)
	}
	b := &Body{Batch: true, Messages: make([]Message, 0, len(elements))}
	seen := make(map[jsonrpc.ID]bool, len(elements))
	for _, e := range elements {
		m, err := decodeEnvelope(e)
		if err != nil {
			return nil, err
		}
		if m.IsCall() {
			if seen[m.ID] {
				return nil, fmt.Errorf("%w: two requests of the batch have the id %v", ErrInvalid, m.ID.Raw())
			}
			seen[m.ID] = true
		}
		b.Messages = append(b.Messages, m)
	}
	return b, nil
}

// Params are the members of a request's or notification's params that front doors decide
// on, strictly decoded. Everything else in params is forwarded as sent, unjudged.
type Params struct {
	// Name is params.name: the tool of tools/call, the prompt of prompts/get.
	Name string
	// Cursor is params.cursor of a list request.
	Cursor string
	// URI is params.uri of resources/read and resources/subscribe.
	URI string
	// ProgressToken is params._meta.progressToken as sent; nil when absent.
	ProgressToken json.RawMessage
	// Traceparent, Tracestate and Baggage are the W3C trace context members of
	// params._meta (SEP-414), read from this same decoding; empty when absent or not a
	// string. Nothing is decided on them: a malformed one only starts a new trace.
	Traceparent, Tracestate, Baggage string
}

// DecodeParams strictly decodes params (absent params decode to the zero Params): they
// must be an object passing [Check], its members name, cursor and uri strings when
// present, and _meta an object.
func DecodeParams(raw json.RawMessage) (*Params, error) {
	if err := Check(raw); len(bytes.TrimSpace(raw)) > 0 && err != nil {
		return nil, err
	}
	return decodeParams(raw)
}

// decodeParams is DecodeParams for params that passed Check.
func decodeParams(raw json.RawMessage) (*Params, error) {
	p := &Params{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, nil
	}
	members, err := objectMembers(raw, "params", paramsMembers)
	if err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		into *string
	}{{"name", &p.Name}, {"cursor", &p.Cursor}, {"uri", &p.URI}} {
		if v, ok := members[f.name]; ok {
			if *f.into, err = stringValue(v); err != nil {
				return nil, fmt.Errorf("%w: params.%s: %w", ErrInvalid, f.name, err)
			}
		}
	}
	if v, ok := members["_meta"]; ok {
		if v.Kind() == 'n' {
			return p, nil
		}
		meta, err := objectMembers(v, "params._meta", metaMembers, traceMembers...)
		if err != nil {
			return nil, err
		}
		if t, ok := meta["progressToken"]; ok {
			p.ProgressToken = json.RawMessage(t)
		}
		for _, f := range []struct {
			name string
			into *string
		}{{"traceparent", &p.Traceparent}, {"tracestate", &p.Tracestate}, {"baggage", &p.Baggage}} {
			if v, ok := meta[f.name]; ok && v.Kind() == '"' {
				*f.into, _ = stringValue(v)
			}
		}
	}
	return p, nil
}

// Check reports whether data is one JSON value that every reader reads alike: valid
// UTF-8, at most MaxDepth deep, and no object with two member names equal after
// unescaping or under Unicode case folding.
func Check(data []byte) error {
	dec := newDecoder(data)
	defer decoders.Put(dec)
	if err := checkValue(dec, 0); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err == nil {
		return fmt.Errorf("%w: more than one JSON value", ErrInvalid)
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// decoders are reused: a decoder's buffers cost more than reading a small message.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// newDecoder returns a pooled decoder reading data; put it back when done.
func newDecoder(data []byte) *jsontext.Decoder {
	dec := decoders.Get().(*jsontext.Decoder)
	dec.Reset(bytes.NewReader(data))
	return dec
}

// checkValue reads one value from dec, checking every object in it.
func checkValue(dec *jsontext.Decoder, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested more than %d levels deep", ErrInvalid, MaxDepth)
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch tok.Kind() {
	case '{':
		var names foldSet
		for dec.PeekKind() == '"' {
			nameTok, err := dec.ReadToken()
			if err != nil {
				return fmt.Errorf("%w: %w", ErrInvalid, err)
			}
			if err := names.add(nameTok.String()); err != nil {
				return err
			}
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil { // '}' or the syntax error that stands there
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	case '[':
		for k := dec.PeekKind(); k != ']' && k != 0; k = dec.PeekKind() {
			if err := checkValue(dec, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// foldSet holds the member names of one object seen so far, by their case-folded form.
// Most objects have a handful of members: a slice scanned in order beats a map.
type foldSet struct {
	folded, names []string
}

// add records name, or says which earlier name it collides with.
func (s *foldSet) add(name string) error {
	f := foldName(name)
	for i, seen := range s.folded {
		if seen != f {
			continue
		}
		if s.names[i] == name {
			return fmt.Errorf("%w: the member name %q appears twice in one object", ErrInvalid, clip(name))
		}
		return fmt.Errorf("%w: the member names %q and %q differ only in case", ErrInvalid, clip(s.names[i]), clip(name))
	}
	s.folded = append(s.folded, f)
	s.names = append(s.names, name)
	return nil
}

// foldName maps name to one representative of the names equal to it under Unicode
// simple case folding (strings.EqualFold's equivalence): each rune becomes the smallest
// rune of its folding orbit.
func foldName(name string) string {
	ascii := true
	for i := range len(name) {
		ascii = ascii && name[i] < utf8.RuneSelf
	}
	if ascii {
		// An ASCII letter's smallest fold is its upper case (the Kelvin sign K and the
		// long s, which fold to k and s, are larger). strings.ToUpper maps an ASCII
		// string's a-z to A-Z and nothing else, copying it once, or not at all when it
		// has no lower case.
		return strings.ToUpper(name)
	}
	out := make([]rune, 0, len(name))
	for _, r := range name {
		smallest := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			smallest = min(smallest, f)
		}
		out = append(out, smallest)
	}
	return string(out)
}

// decodeEnvelope decodes one message's envelope: an object whose decisive members are
// spelled exactly, with a string method and a string, number or null id.
func decodeEnvelope(raw []byte) (Message, error) {
	members, err := objectMembers(raw, "the message", envelopeMembers)
	if err != nil {
		return Message{}, err
	}
	var m Message
	if v, ok := members["method"]; ok {
		if m.Method, err = stringValue(v); err != nil {
			return Message{}, fmt.Errorf("%w: method: %w", ErrInvalid, err)
		}
	}
	if v, ok := members["id"]; ok {
		var id any
		if err := json.Unmarshal(v, &id); err != nil {
			return Message{}, fmt.Errorf("%w: id: %w", ErrInvalid, err)
		}
		if m.ID, err = jsonrpc.MakeID(id); err != nil {
			return Message{}, fmt.Errorf("%w: id: %w", ErrInvalid, err)
		}
	}
	if v, ok := members["params"]; ok {
		m.Params = json.RawMessage(v)
	}
	if _, err = decodeParams(m.Params); err != nil {
		return Message{}, err
	}
	return m, nil
}

// objectMembers returns the decisive members of the JSON object raw by exact name,
// refusing a member whose name differs from a decisive name only in case, and the
// members named in also by exact name. raw has passed Check, so names are unique. what
// names the object in errors.
func objectMembers(raw []byte, what string, decisive []string, also ...string) (map[string]jsontext.Value, error) {
	dec := newDecoder(raw)
	defer decoders.Put(dec)
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if tok.Kind() != '{' {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrInvalid, what)
	}
	members := make(map[string]jsontext.Value)
	for dec.PeekKind() == '"' {
		nameTok, err := dec.ReadToken()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		name := nameTok.String()
		for _, d := range decisive {
			// strings.EqualFold is foldName's equivalence, without building either fold.
			if name != d && strings.EqualFold(name, d) {
				return nil, fmt.Errorf("%w: %s has a member %q: it must be spelled %q", ErrInvalid, what, clip(name), d)
			}
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if isDecisive(name, decisive) || isDecisive(name, also) {
			members[name] = bytes.Clone(v)
		}
	}
	return members, nil
}

func isDecisive(name string, decisive []string) bool {
	for _, d := range decisive {
		if name == d {
			return true
		}
	}
	return false
}

// eachElement calls f with each element of the JSON array raw.
func eachElement(raw []byte, f func(jsontext.Value) error) error {
	dec := newDecoder(raw)
	defer decoders.Put(dec)
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for k := dec.PeekKind(); k != ']' && k != 0; k = dec.PeekKind() {
		v, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := f(bytes.Clone(v)); err != nil {
			return err
		}
	}
	return nil
}

// stringValue decodes a JSON string.
func stringValue(v jsontext.Value) (string, error) {
	if v.Kind() != '"' {
		return "", errors.New("not a string")
	}
	// jsontext unquotes exactly as Check reads (it refuses what Check refuses, such as
	// a lone surrogate escape), without encoding/json's reflection.
	s, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return "", err
	}
	return string(s), nil
}

// clip bounds a client-chosen name quoted in an error.
func clip(s string) string {
	const maxQuoted = 64
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
