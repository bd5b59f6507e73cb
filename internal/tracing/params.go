package tracing

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// MetaParams returns params, which passed mcpmsg's checks (no member two readers
// could read apart), with m as the trace
// context of their _meta in place of the caller's: every other member, of params and of
// _meta, is kept as it was judged. A _meta member that names a trace context key in
// another case is dropped too, so that no reader finds two.
func MetaParams(params json.RawMessage, m Meta) (json.RawMessage, error) {
	type member struct {
		name  string
		value jsontext.Value
	}
	readObject := func(raw []byte) ([]member, error) {
		dec := jsontext.NewDecoder(bytes.NewReader(raw))
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, err
		}
		if tok.Kind() != '{' {
			return nil, errors.New("not a JSON object")
		}
		var members []member
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
			members = append(members, member{name: name, value: bytes.Clone(v)})
		}
		return members, nil
	}
	var top []member
	if len(bytes.TrimSpace(params)) > 0 {
		var err error
		if top, err = readObject(params); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	enc := jsontext.NewEncoder(&buf)
	writeMeta := func(old jsontext.Value) error {
		var members []member
		if old.Kind() == '{' {
			var err error
			if members, err = readObject(old); err != nil {
				return err
			}
		}
		if err := enc.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		set := []member{{TraceparentKey, nil}, {TracestateKey, nil}, {BaggageKey, nil}}
		values := []string{m.Traceparent, m.Tracestate, m.Baggage}
		for _, mem := range members {
			// The caller's trace context and baggage give way to m's, which is what the
			// gateway parsed of them (baggage that did not parse, over W3C's limits
			// say, is not sent on).
			replaced := false
			for _, s := range set {
				if strings.EqualFold(mem.name, s.name) {
					replaced = true
				}
			}
			if replaced {
				continue
			}
			if err := enc.WriteToken(jsontext.String(mem.name)); err != nil {
				return err
			}
			if err := enc.WriteValue(mem.value); err != nil {
				return err
			}
		}
		for i, s := range set {
			if values[i] == "" {
				continue
			}
			if err := enc.WriteToken(jsontext.String(s.name)); err != nil {
				return err
			}
			if err := enc.WriteToken(jsontext.String(values[i])); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndObject)
	}
	if err := enc.WriteToken(jsontext.BeginObject); err != nil {
		return nil, err
	}
	wroteMeta := false
	for _, mem := range top {
		if err := enc.WriteToken(jsontext.String(mem.name)); err != nil {
			return nil, err
		}
		var err error
		if mem.name == "_meta" {
			wroteMeta = true
			err = writeMeta(mem.value)
		} else {
			err = enc.WriteValue(mem.value)
		}
		if err != nil {
			return nil, err
		}
	}
	if !wroteMeta {
		if err := enc.WriteToken(jsontext.String("_meta")); err != nil {
			return nil, err
		}
		if err := writeMeta(nil); err != nil {
			return nil, err
		}
	}
	if err := enc.WriteToken(jsontext.EndObject); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
