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
		if v, ok := members.get(f.name); ok {
			if *f.into, err = stringValue(v); err != nil {
				return nil, fmt.Errorf("%w: params.%s: %w", ErrInvalid, f.name, err)
			}
		}
	}
	if v, ok := members.get("_meta"); ok {
		if v.Kind() == 'n' {
			return p, nil
		}
		meta, err := objectMembers(v, "params._meta", metaMembers, traceMembers...)
		if err != nil {
			return nil, err
		}
		if t, ok := meta.get("progressToken"); ok {
			p.ProgressToken = json.RawMessage(t)
		}
		for _, f := range []struct {
			name string
			into *string
		}{{"traceparent", &p.Traceparent}, {"tracestate", &p.Tracestate}, {"baggage", &p.Baggage}} {
			if v, ok := meta.get(f.name); ok && v.Kind() == '"' {
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
	defer putDecoder(dec)
	if err := checkValue(dec, data, 0); err != nil {
		return err
	}
	if _, err := dec.ReadToken(); err == nil {
		return fmt.Errorf("%w: more than one JSON value", ErrInvalid)
	} else if !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// decoders are reused: a decoder's state costs more than reading a small message.
var decoders = sync.Pool{New: func() any { return jsontext.NewDecoder(&bytes.Buffer{}, decoderOptions) }}

// decoderOptions leave duplicate member names to this package: memberNames finds them
// (and names that differ only in case), so jsontext's own bookkeeping of every name
// would be the same work twice. Invalid UTF-8 stays jsontext's to refuse.
var decoderOptions = jsontext.AllowDuplicateNames(true)

// newDecoder returns a pooled decoder reading data; give it back with putDecoder. A
// decoder reading a bytes.Buffer parses data where it lies, without copying it.
func newDecoder(data []byte) *jsontext.Decoder {
	dec := decoders.Get().(*jsontext.Decoder)
	dec.Reset(bytes.NewBuffer(data), decoderOptions)
	return dec
}

// putDecoder gives dec back to the pool, holding on to nothing it read.
func putDecoder(dec *jsontext.Decoder) {
	dec.Reset(&bytes.Buffer{}, decoderOptions)
	decoders.Put(dec)
}

// readName reads the member name dec stands at and returns it unescaped. A name without
// escapes is data's own bytes, copied nowhere: InputOffset says where it lies in data.
func readName(dec *jsontext.Decoder, data []byte) ([]byte, error) {
	quoted, err := dec.ReadValue()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if bytes.IndexByte(quoted, '\\') >= 0 {
		name, err := jsontext.AppendUnquote(nil, quoted)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return name, nil
	}
	end := int(dec.InputOffset())
	return data[end-len(quoted)+1 : end-1], nil
}

// checkValue reads one value of data from dec, checking every object in it.
func checkValue(dec *jsontext.Decoder, data []byte, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested more than %d levels deep", ErrInvalid, MaxDepth)
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch tok.Kind() {
	case '{':
		var names memberNames
		for dec.PeekKind() == '"' {
			name, err := readName(dec, data)
			if err != nil {
				return err
			}
			if err := names.add(name); err != nil {
				return err
			}
			if err := checkValue(dec, data, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil { // '}' or the syntax error that stands there
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	case '[':
		for k := dec.PeekKind(); k != ']' && k != 0; k = dec.PeekKind() {
			if err := checkValue(dec, data, depth+1); err != nil {
				return err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// fewMembers is how many members an object may have before memberNames keeps their
// names by folded form: up to it, comparing each name with those before is cheaper than
// folding them; beyond it, the time to check an object must grow with its members, not
// with their square, or one wide object in a body would keep a core busy for minutes.
const fewMembers = 16

// memberNames holds the member names of one object seen so far.
type memberNames struct {
	few    [fewMembers][]byte
	n      int
	folded map[string][]byte // by foldName, once there are more than fewMembers
}

// add records name, or says which earlier name it collides with.
func (s *memberNames) add(name []byte) error {
	if s.folded == nil && s.n < fewMembers {
		for _, seen := range s.few[:s.n] {
			// bytes.EqualFold is foldName's equivalence, without building either fold.
			if bytes.EqualFold(seen, name) {
				return collision(seen, name)
			}
		}
		s.few[s.n] = name
		s.n++
		return nil
	}
	if s.folded == nil {
		s.folded = make(map[string][]byte, 2*fewMembers)
		for _, seen := range s.few[:s.n] {
			s.folded[foldName(string(seen))] = seen
		}
	}
	f := foldName(string(name))
	if seen, ok := s.folded[f]; ok {
		return collision(seen, name)
	}
	s.folded[f] = name
	return nil
}

// collision is the error for a member name equal to an earlier one under folding.
func collision(seen, name []byte) error {
	if bytes.Equal(seen, name) {
		return fmt.Errorf("%w: the member name %q appears twice in one object", ErrInvalid, clip(string(name)))
	}
	return fmt.Errorf("%w: the member names %q and %q differ only in case", ErrInvalid, clip(string(seen)), clip(string(name)))
}

// foldName maps name to one representative of the names equal to it under Unicode
// simple case folding (bytes.EqualFold's equivalence): each rune becomes the smallest
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
	if v, ok := members.get("method"); ok {
		if m.Method, err = stringValue(v); err != nil {
			return Message{}, fmt.Errorf("%w: method: %w", ErrInvalid, err)
		}
	}
	if v, ok := members.get("id"); ok {
		var id any
		if err := json.Unmarshal(v, &id); err != nil {
			return Message{}, fmt.Errorf("%w: id: %w", ErrInvalid, err)
		}
		if m.ID, err = jsonrpc.MakeID(id); err != nil {
			return Message{}, fmt.Errorf("%w: id: %w", ErrInvalid, err)
		}
	}
	if v, ok := members.get("params"); ok {
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
// names the object in errors. The values are raw's own bytes.
func objectMembers(raw []byte, what string, decisive []string, also ...string) (members, error) {
	dec := newDecoder(raw)
	defer putDecoder(dec)
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if tok.Kind() != '{' {
		return nil, fmt.Errorf("%w: %s is not a JSON object", ErrInvalid, what)
	}
	var found members
	for dec.PeekKind() == '"' {
		name, err := readName(dec, raw)
		if err != nil {
			return nil, err
		}
		for _, d := range decisive {
			// bytes.EqualFold is foldName's equivalence, without building either fold.
			if string(name) != d && bytes.EqualFold(name, []byte(d)) {
				return nil, fmt.Errorf("%w: %s has a member %q: it must be spelled %q", ErrInvalid, what, clip(string(name)), d)
			}
		}
		v, err := dec.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if d, ok := exactly(name, decisive); ok {
			found = append(found, member{d, valueIn(dec, raw, v)})
		} else if d, ok := exactly(name, also); ok {
			found = append(found, member{d, valueIn(dec, raw, v)})
		}
	}
	return found, nil
}

// member is one member of an object that objectMembers returns.
type member struct {
	name  string
	value jsontext.Value
}

// members are the members objectMembers found, in the order they came.
type members []member

// get returns the value of the member named name.
func (ms members) get(name string) (jsontext.Value, bool) {
	for _, m := range ms {
		if m.name == name {
			return m.value, true
		}
	}
	return nil, false
}

// exactly returns the one of names that name spells exactly.
func exactly(name []byte, names []string) (string, bool) {
	for _, d := range names {
		if string(name) == d {
			return d, true
		}
	}
	return "", false
}

// valueIn returns the value v that dec has just read from data as data's own bytes,
// which outlive the decoder's next read (InputOffset says where v ends in data).
func valueIn(dec *jsontext.Decoder, data []byte, v jsontext.Value) jsontext.Value {
	end := int(dec.InputOffset())
	return jsontext.Value(data[end-len(v) : end : end])
}

// eachElement calls f with each element of the JSON array raw.
func eachElement(raw []byte, f func(jsontext.Value) error) error {
	dec := newDecoder(raw)
	defer putDecoder(dec)
	if _, err := dec.ReadToken(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for k := dec.PeekKind(); k != ']' && k != 0; k = dec.PeekKind() {
		v, err := dec.ReadValue()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err := f(valueIn(dec, raw, v)); err != nil {
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
