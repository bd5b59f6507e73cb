package mcpmsg

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
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

// CheckBody judges a POST body from an MCP client: one JSON-RPC message (an object) or a
// non-empty batch (an array of objects), checked as the package documentation says. Two
// calls of one batch may not share an id: their answers could not be told apart. The
// body is read once: the checks of every value and the decisive members come from the
// same reading.
func CheckBody(body []byte) (*Body, error) {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 {
		return nil, fmt.Errorf("%w: the body is empty", ErrInvalid)
	}
	w := newWalker(body)
	defer w.close()
	var b *Body
	if w.dec.PeekKind() != '[' {
		m, err := w.message(0)
		if err != nil {
			return nil, err
		}
		b = &Body{Messages: []Message{m}}
	} else {
		if _, err := w.dec.ReadToken(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		b = &Body{Batch: true}
		var seen map[jsonrpc.ID]bool
		for k := w.dec.PeekKind(); k != ']' && k != 0; k = w.dec.PeekKind() {
			m, err := w.message(1)
			if err != nil {
				return nil, err
			}
			if m.IsCall() {
				if seen[m.ID] {
					return nil, fmt.Errorf("%w: two requests of the batch have the id %v", ErrInvalid, m.ID.Raw())
				}
				if seen == nil {
					seen = make(map[jsonrpc.ID]bool)
				}
				seen[m.ID] = true
			}
			b.Messages = append(b.Messages, m)
		}
		if _, err := w.dec.ReadToken(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if len(b.Messages) == 0 {
			return nil, fmt.Errorf("%w: an empty batch", ErrInvalid)
		}
	}
	if err := w.end(); err != nil {
		return nil, err
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
	// Arguments is params.arguments of tools/call and prompts/get as it appears in the
	// params (the bytes forwarded), checked like the rest; nil when absent. Decisions on
	// the arguments decode these bytes, and nothing else.
	Arguments json.RawMessage
	// ProgressToken is params._meta.progressToken as sent; nil when absent.
	ProgressToken json.RawMessage
	// Traceparent, Tracestate and Baggage are the W3C trace context members of
	// params._meta (SEP-414), read from this same decoding; empty when absent or not a
	// string. Nothing is decided on them: a malformed one only starts a new trace.
	Traceparent, Tracestate, Baggage string
	// MetaEnd is where members can be added to these params' _meta without reading
	// them again; see [MetaEnd].
	MetaEnd MetaEnd
}

// MetaEnd is where a forwarder can add members (its own trace context) to the _meta of
// the params DecodeParams read: at Offset in them, the closing brace of _meta, or of
// params when they have no _meta (InMeta false; the members then go in a new _meta),
// after a comma when the object that closes there has members. The zero MetaEnd (Offset
// 0) says there is no such place: params were absent or their _meta is null, or _meta
// has a member that names a trace context (traceparent, tracestate, baggage) in some
// spelling, which a forwarder sending its own must take out rather than add to.
type MetaEnd struct {
	Offset  int
	InMeta  bool
	Members bool
}

// DecodeParams strictly decodes params (absent params decode to the zero Params): they
// must be an object passing [Check], its members name, cursor and uri strings when
// present, and _meta an object.
func DecodeParams(raw json.RawMessage) (*Params, error) {
	p := &Params{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return p, nil
	}
	w := newWalker(raw)
	defer w.close()
	if err := w.params(0, p); err != nil {
		return nil, err
	}
	if err := w.end(); err != nil {
		return nil, err
	}
	return p, nil
}

// Check reports whether data is one JSON value that every reader reads alike: valid
// UTF-8, at most MaxDepth deep, and no object with two member names equal after
// unescaping or under Unicode case folding.
func Check(data []byte) error {
	w := newWalker(data)
	defer w.close()
	if err := w.value(0); err != nil {
		return err
	}
	return w.end()
}

// walker reads one JSON text once, checking every value in it as Check does; the
// message, params and _meta objects of MCP are read by methods of their own that also
// pick out their decisive members on the way.
type walker struct {
	dec  *jsontext.Decoder
	data []byte
}

func newWalker(data []byte) *walker { return &walker{dec: newDecoder(data), data: data} }

func (w *walker) close() { putDecoder(w.dec) }

// end reports an error unless the text has ended.
func (w *walker) end() error {
	if _, err := w.dec.ReadToken(); err == nil {
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

// value reads one value, checking every object in it.
func (w *walker) value(depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested more than %d levels deep", ErrInvalid, MaxDepth)
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	switch tok.Kind() {
	case '0':
		// A number beyond float64 is read as infinity by some readers and refused by
		// others (Go's among them).
		if _, err := tok.Float(); err != nil {
			return fmt.Errorf("%w: a number out of range", ErrInvalid)
		}
	case '{':
		return w.members("", nil, func(string, []byte) error { return w.value(depth + 1) })
	case '[':
		for k := w.dec.PeekKind(); k != ']' && k != 0; k = w.dec.PeekKind() {
			if err := w.value(depth + 1); err != nil {
				return err
			}
		}
		if _, err := w.dec.ReadToken(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// capture reads one value as value does and returns it: data's own bytes.
func (w *walker) capture(depth int) (jsontext.Value, error) {
	start := int(w.dec.InputOffset())
	if err := w.value(depth); err != nil {
		return nil, err
	}
	end := int(w.dec.InputOffset())
	// What lies before the value since the last token: white space and the colon
	// after a member name or the comma between elements, none of which begins a value.
	return jsontext.Value(bytes.TrimLeft(w.data[start:end:end], " \t\r\n:,")), nil
}

// members reads the members of the object whose '{' was just read, and its '}'. It
// refuses two names equal under folding and a name that spells one of decisive in
// another case (what names the object in that error), and calls member for each member
// with the decisive name it spells exactly ("" for any other) and the name itself;
// member reads the value.
func (w *walker) members(what string, decisive []string, member func(decisive string, name []byte) error) error {
	var names memberNames
	for w.dec.PeekKind() == '"' {
		name, err := readName(w.dec, w.data)
		if err != nil {
			return err
		}
		if err := names.add(name); err != nil {
			return err
		}
		exact := ""
		for _, d := range decisive {
			if string(name) == d {
				exact = d
				break
			}
			// bytes.EqualFold is foldName's equivalence, without building either fold.
			if bytes.EqualFold(name, []byte(d)) {
				return fmt.Errorf("%w: %s has a member %q: it must be spelled %q", ErrInvalid, what, clip(string(name)), d)
			}
		}
		if err := member(exact, name); err != nil {
			return err
		}
	}
	if _, err := w.dec.ReadToken(); err != nil { // '}' or the syntax error that stands there
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// openObject reads the '{' of an object that what names, refusing any other value.
func (w *walker) openObject(depth int, what string) error {
	if depth > MaxDepth {
		return fmt.Errorf("%w: nested more than %d levels deep", ErrInvalid, MaxDepth)
	}
	tok, err := w.dec.ReadToken()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if tok.Kind() != '{' {
		return fmt.Errorf("%w: %s is not a JSON object", ErrInvalid, what)
	}
	return nil
}

// message reads one message's envelope: an object whose decisive members are spelled
// exactly, with a string method, a string, number or null id, and params as DecodeParams
// reads them.
func (w *walker) message(depth int) (Message, error) {
	var m Message
	if err := w.openObject(depth, "the message"); err != nil {
		return Message{}, err
	}
	err := w.members("the message", envelopeMembers, func(decisive string, _ []byte) error {
		switch decisive {
		case "method":
			v, err := w.capture(depth + 1)
			if err != nil {
				return err
			}
			if m.Method, err = stringValue(v); err != nil {
				return fmt.Errorf("%w: method: %w", ErrInvalid, err)
			}
		case "id":
			v, err := w.capture(depth + 1)
			if err != nil {
				return err
			}
			id, err := idValue(v)
			if err != nil {
				return fmt.Errorf("%w: id: %w", ErrInvalid, err)
			}
			if m.ID, err = jsonrpc.MakeID(id); err != nil {
				return fmt.Errorf("%w: id: %w", ErrInvalid, err)
			}
		case "params":
			start := int(w.dec.InputOffset())
			if err := w.params(depth+1, &Params{}); err != nil {
				return err
			}
			end := int(w.dec.InputOffset())
			m.Params = json.RawMessage(bytes.TrimLeft(w.data[start:end:end], " \t\r\n:"))
		default:
			return w.value(depth + 1)
		}
		return nil
	})
	return m, err
}

// params reads the params object into p: name, cursor and uri strings when present, and
// _meta an object or null.
func (w *walker) params(depth int, p *Params) error {
	if err := w.openObject(depth, "params"); err != nil {
		return err
	}
	members, meta := false, false
	err := w.members("params", paramsMembers, func(decisive string, _ []byte) error {
		members = true
		var into *string
		switch decisive {
		case "name":
			into = &p.Name
		case "cursor":
			into = &p.Cursor
		case "uri":
			into = &p.URI
		case "arguments":
			v, err := w.capture(depth + 1)
			p.Arguments = json.RawMessage(v)
			return err
		case "_meta":
			meta = true
			if w.dec.PeekKind() == 'n' {
				return w.value(depth + 1)
			}
			return w.meta(depth+1, p)
		default:
			return w.value(depth + 1)
		}
		v, err := w.capture(depth + 1)
		if err != nil {
			return err
		}
		if *into, err = stringValue(v); err != nil {
			return fmt.Errorf("%w: params.%s: %w", ErrInvalid, decisive, err)
		}
		return nil
	})
	if err == nil && !meta {
		// Just read: params' closing brace.
		p.MetaEnd = MetaEnd{Offset: int(w.dec.InputOffset()) - 1, Members: members}
	}
	return err
}

// meta reads params._meta into p: its progress token as sent, and the trace context
// members when they are strings spelled exactly (never refused in another spelling).
func (w *walker) meta(depth int, p *Params) error {
	if err := w.openObject(depth, "params._meta"); err != nil {
		return err
	}
	members, traceNamed := false, false
	err := w.members("params._meta", metaMembers, func(decisive string, name []byte) error {
		members = true
		traceNamed = traceNamed || bytes.EqualFold(name, []byte("traceparent")) ||
			bytes.EqualFold(name, []byte("tracestate")) || bytes.EqualFold(name, []byte("baggage"))
		var into *string
		switch {
		case decisive == "progressToken":
			v, err := w.capture(depth + 1)
			p.ProgressToken = json.RawMessage(v)
			return err
		case string(name) == "traceparent":
			into = &p.Traceparent
		case string(name) == "tracestate":
			into = &p.Tracestate
		case string(name) == "baggage":
			into = &p.Baggage
		default:
			return w.value(depth + 1)
		}
		v, err := w.capture(depth + 1)
		if err == nil && v.Kind() == '"' {
			*into, _ = stringValue(v)
		}
		return err
	})
	if err == nil && !traceNamed {
		// Just read: _meta's closing brace.
		p.MetaEnd = MetaEnd{Offset: int(w.dec.InputOffset()) - 1, InMeta: true, Members: members}
	}
	return err
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

// idValue decodes a message's id as encoding/json decodes it into an any, which
// jsonrpc.MakeID takes: a string, a number as float64 (strconv.ParseFloat, as
// encoding/json parses it), or nil; anything else (which MakeID refuses) by
// encoding/json itself.
func idValue(v jsontext.Value) (any, error) {
	switch v.Kind() {
	case '"':
		return stringValue(v)
	case '0':
		return strconv.ParseFloat(string(v), 64)
	case 'n':
		return nil, nil
	}
	var id any
	err := json.Unmarshal(v, &id)
	return id, err
}

// stringValue decodes a JSON string.
func stringValue(v jsontext.Value) (string, error) {
	if v.Kind() != '"' {
		return "", errors.New("not a string")
	}
	if len(v) >= 2 && bytes.IndexByte(v, '\\') < 0 {
		// Without escapes a string is the bytes between its quotes: the decoder that
		// read it has checked them (valid UTF-8, no control characters).
		return string(v[1 : len(v)-1]), nil
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
