package tracing

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
)

// MetaParams returns params, which passed mcpmsg's checks (no member two readers
// could read apart), with m as the trace context of their _meta in place of the
// caller's. Only _meta's value is rewritten, or added as params' last member when they
// have none: every other member of params is forwarded byte for byte as it was judged,
// and every other member of _meta as it was read. A _meta member that names a trace
// context key in another case is dropped too, so that no reader finds two.
//
// Every traced call through a session passes here. at is where mcpmsg's decoding of
// these same params found m can be added (see mcpmsg.MetaEnd): where it found a place,
// m's members are put there and params are not read again; otherwise (the caller's _meta
// carries a trace context of its own, or is null) they are read once more, by a reused
// decoder, to take the caller's out.
func MetaParams(params json.RawMessage, at mcpmsg.MetaEnd, m Meta) (json.RawMessage, error) {
	if at.Offset > 0 && at.Offset < len(params) && params[at.Offset] == '}' {
		return insertMeta(params, at, m)
	}
	if len(bytes.TrimSpace(params)) == 0 {
		return insertMeta(json.RawMessage(`{}`), mcpmsg.MetaEnd{Offset: 1}, m)
	}
	r := readers.Get().(*reader)
	defer r.put(len(params))
	dec := r.reset(params)
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	if tok.Kind() != '{' {
		return nil, errors.New("not a JSON object")
	}
	// The offsets in params of _meta's value, when params have one, and whether params
	// have any member.
	metaStart, metaEnd, members := -1, -1, false
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		name := tok.String() // before the next read, which may reuse the token's bytes
		v, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		members = true
		if name == "_meta" {
			// The decoder refuses a second _meta (duplicate names), as mcpmsg does.
			metaEnd = int(dec.InputOffset())
			metaStart = metaEnd - len(v)
		}
	}
	if tok, err = dec.ReadToken(); err != nil {
		return nil, err
	}
	if tok.Kind() != '}' {
		return nil, errors.New("not a JSON object")
	}
	end := int(dec.InputOffset()) // just after params' closing brace
	if metaStart < 0 {
		return insertMeta(params[:end], mcpmsg.MetaEnd{Offset: end - 1, Members: members}, m)
	}
	out := make([]byte, 0, end+metaRoom(m))
	out = append(out, params[:metaStart]...)
	if out, err = appendMeta(out, jsontext.Value(params[metaStart:metaEnd]), m); err != nil {
		return nil, err
	}
	return append(out, params[metaEnd:end]...), nil
}

// metaRoom is about what m's members take in JSON: their names, quotes and separators,
// and their values.
func metaRoom(m Meta) int { return len(m.Traceparent) + len(m.Tracestate) + len(m.Baggage) + 64 }

// insertMeta returns params with m's members added at at, the closing brace of their
// _meta or, in a _meta of their own, of params.
func insertMeta(params json.RawMessage, at mcpmsg.MetaEnd, m Meta) (json.RawMessage, error) {
	out := make([]byte, 0, len(params)+metaRoom(m))
	out = append(out, params[:at.Offset]...)
	if at.InMeta {
		out, err := appendMetaMembers(out, at.Members, m)
		return append(out, params[at.Offset:]...), err
	}
	if at.Members {
		out = append(out, ',')
	}
	out = append(out, `"_meta":{`...)
	out, err := appendMetaMembers(out, false, m)
	out = append(out, '}')
	return append(out, params[at.Offset:]...), err
}

// appendMetaMembers appends m's members to dst, inside an object that has members
// before them when comma is set.
func appendMetaMembers(dst []byte, comma bool, m Meta) ([]byte, error) {
	var err error
	for _, kv := range [...][2]string{{TraceparentKey, m.Traceparent}, {TracestateKey, m.Tracestate}, {BaggageKey, m.Baggage}} {
		if kv[1] == "" {
			continue
		}
		if comma {
			dst = append(dst, ',')
		}
		comma = true
		dst = append(dst, '"')
		dst = append(dst, kv[0]...)
		dst = append(dst, `":`...)
		// tracestate and baggage are the caller's, as the propagator parsed them: W3C
		// lets a tracestate value hold a quote or a backslash.
		if dst, err = jsontext.AppendQuote(dst, kv[1]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendMeta appends to dst the _meta object to send in place of old, the caller's
// _meta: old's members (when old is an object) but its trace context and baggage, in
// any spelling of their names, then m's.
func appendMeta(dst []byte, old jsontext.Value, m Meta) ([]byte, error) {
	w := writers.Get().(*writer)
	defer w.put()
	enc := w.reset()
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return nil, err
	}
	if old.Kind() == '{' {
		r := readers.Get().(*reader)
		defer r.put(len(old))
		dec := r.reset(old)
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		for dec.PeekKind() == '"' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			name := tok.String()
			v, err := dec.ReadValue()
			if err != nil {
				return nil, err
			}
			// The caller's trace context and baggage give way to m's, which is what the
			// gateway parsed of them (baggage that did not parse, over W3C's limits
			// say, is not sent on).
			if isTraceKey(name) {
				continue
			}
			if err := enc.WriteToken(jsontext.String(name)); err != nil {
				return nil, err
			}
			if err := enc.WriteValue(v); err != nil {
				return nil, err
			}
		}
	}
	if err := enc.WriteToken(jsontext.EndObject); err != nil {
		return nil, err
	}
	// old's members as they are kept, then m's before the closing brace.
	kept := bytes.TrimRight(w.buf.Bytes(), "\n")
	dst, err := appendMetaMembers(append(dst, kept[:len(kept)-1]...), len(kept) > 2, m)
	return append(dst, '}'), err
}

// maxPooledBytes bounds what a reused decoder or encoder is left holding: one that
// handled more is dropped rather than kept.
const maxPooledBytes = 64 << 10

// reader is a reusable decoder over a byte slice.
type reader struct {
	src bytes.Reader
	dec *jsontext.Decoder
}

var readers = sync.Pool{New: func() any { return &reader{dec: jsontext.NewDecoder(bytes.NewReader(nil))} }}

func (r *reader) reset(b []byte) *jsontext.Decoder {
	r.src.Reset(b)
	r.dec.Reset(&r.src)
	return r.dec
}

// put returns r to the pool unless it read more than maxPooledBytes, and lets go of
// what it read.
func (r *reader) put(n int) {
	r.src.Reset(nil)
	if n <= maxPooledBytes {
		readers.Put(r)
	}
}

// writer is a reusable encoder into a buffer.
type writer struct {
	buf bytes.Buffer
	enc *jsontext.Encoder
}

var writers = sync.Pool{New: func() any {
	w := &writer{}
	w.enc = jsontext.NewEncoder(&w.buf)
	return w
}}

func (w *writer) reset() *jsontext.Encoder {
	w.buf.Reset()
	w.enc.Reset(&w.buf)
	return w.enc
}

func (w *writer) put() {
	if w.buf.Cap() <= maxPooledBytes {
		writers.Put(w)
	}
}
