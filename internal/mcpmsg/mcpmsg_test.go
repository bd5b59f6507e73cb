package mcpmsg

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func TestCheckBodyRefusesWhatReadersCouldReadTwoWays(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		why        string // a piece of the error; empty when the body is valid
	}{
		{"a plain call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"x":1}}}`, ""},
		{"a notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, ""},
		{"a response", `{"jsonrpc":"2.0","id":"a","result":{}}`, ""},
		{"an escaped name alone reads as itself", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"echo"}}`, ""},
		{"arguments may use any case of their own", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"Name":"x"}}}`, ""},
		{"a batch", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, ""},

		{"a second name in upper case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","NAME":"echo"}}`, "differ only in case"},
		{"a second name in mixed case", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","nAmE":"echo"}}`, "differ only in case"},
		{"a duplicate name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","name":"echo"}}`, "name"},
		{"a duplicate by escaping", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","n\u0061me":"echo"}}`, "name"},
		{"a duplicate by the Kelvin sign", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"kind":1,"\u212Aind":2}}`, "differ only in case"},
		{"a duplicate deep in arguments", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"a":[{"path":"/","PATH":"/etc"}]}}}`, "differ only in case"},
		{"a duplicate progress token", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","_meta":{"progressToken":1,"progress\u0054oken":2}}}`, "progressToken"},
		{"a duplicate method", `{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call"}`, "method"},
		{"a method in another case", `{"jsonrpc":"2.0","id":1,"Method":"tools/call"}`, `must be spelled "method"`},
		{"an id in another case", `{"jsonrpc":"2.0","ID":1,"method":"tools/call"}`, `must be spelled "id"`},
		{"a non-string method", `{"jsonrpc":"2.0","id":1,"method":7}`, "method"},
		{"an object id", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, "id"},
		{"two calls of a batch with one id", `[{"jsonrpc":"2.0","id":7,"method":"tools/list"},{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}]`, "id 7"},
		{"an empty batch", `[]`, "empty batch"},
		{"a batch of non-objects", `[1]`, "not a JSON object"},
		{"two values", `{"jsonrpc":"2.0","method":"a"}{"jsonrpc":"2.0","method":"b"}`, "more than one"},
		{"invalid UTF-8 in a name", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\xff\":1}}", "UTF-8"},
		{"truncated", `{"jsonrpc":"2.0","id":1`, "invalid"},
		{"a number beyond float64", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{"n":-1E400}}}`, "out of range"},
		{"too deep", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":` + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + `}}`, "deep"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CheckBody([]byte(tc.body))
			switch {
			case tc.why == "" && err != nil:
				t.Fatalf("CheckBody refused a valid body: %v", err)
			case tc.why != "" && err == nil:
				t.Fatalf("CheckBody accepted %s", tc.body)
			case tc.why != "" && !strings.Contains(err.Error(), tc.why):
				t.Fatalf("CheckBody's error %q does not say %q", err, tc.why)
			case err != nil && !errors.Is(err, ErrInvalid):
				t.Fatalf("CheckBody's error %q does not wrap ErrInvalid", err)
			}
		})
	}
}

func TestCheckBodyReadsTheEnvelope(t *testing.T) {
	b, err := CheckBody([]byte(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}},{"jsonrpc":"2.0","id":"x","result":{}}]`))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for i := range b.Messages {
		if b.Messages[i].IsCall() {
			calls++
		}
	}
	if !b.Batch || len(b.Messages) != 3 || calls != 1 {
		t.Fatalf("got batch=%v, %d messages, %d calls; want a batch of 3 with 1 call", b.Batch, len(b.Messages), calls)
	}
	if m := b.Messages[0]; m.Method != "tools/call" || m.ID != testutil.ID(t, float64(1)) || string(m.Params) != `{"name":"a"}` {
		t.Fatalf("first message read as %+v", m)
	}
	if m := b.Messages[2]; m.Method != "" || m.ID != testutil.ID(t, "x") || m.IsCall() {
		t.Fatalf("the response read as %+v", m)
	}
}

func TestDecodeParamsDecidesOnTheExactMembers(t *testing.T) {
	p, err := DecodeParams(json.RawMessage(`{"name":"echo","arguments":{"NAME":"x"},"_meta":{"progressToken":"t1","other":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "echo" || string(p.ProgressToken) != `"t1"` {
		t.Fatalf("decoded %+v", p)
	}
	for _, raw := range []string{
		`{"NAME":"echo"}`,                          // a reader that ignores case would find a name
		`{"name":"a","Arguments":{}}`,              // and arguments here
		`{"name":"a","_meta":{"ProgressToken":1}}`, // and a progress token here
		`{"name":"a","_META":{}}`,
		`{"name":1}`,
		`{"name":"a","_meta":[]}`,
		`[1]`,
	} {
		if _, err := DecodeParams(json.RawMessage(raw)); !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeParams(%s) = %v, want an invalid message", raw, err)
		}
	}
	if p, err := DecodeParams(nil); err != nil || p.Name != "" {
		t.Fatalf("absent params: %+v, %v", p, err)
	}
}

// FuzzCheck holds Check to its promise: whatever it accepts, Go's encoding/json (which
// ignores case and keeps the last duplicate) reads every object's members as an exact,
// first-wins reader does.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","NAME":"b"}`, `{"a":{"b":[{"c":1,"C":2}]}}`, `{"n\u0061me":1,"name":2}`,
		`{"k":1,"\u212a":2}`, `{"s":1,"\u017f":2}`, `[{"a":1},{"a":1}]`, `"x"`, `{"ǅ":1,"ǆ":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data) != nil {
			return
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatalf("Check accepted what encoding/json cannot read: %q: %v", data, err)
		}
		var walk func(any)
		walk = func(v any) {
			switch v := v.(type) {
			case map[string]any:
				seen := map[string]string{}
				for k, e := range v {
					for other := range seen {
						if strings.EqualFold(other, k) {
							t.Fatalf("Check accepted members %q and %q in %q", other, k, data)
						}
					}
					seen[k] = k
					walk(e)
				}
			case []any:
				for _, e := range v {
					walk(e)
				}
			}
		}
		walk(v)
	})
}

func BenchmarkCheckBodyToolsCall(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_notes","arguments":{"query":"quarterly report","limit":10,"tags":["finance","q3"]},"_meta":{"progressToken":"p-42"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CheckBody(body); err != nil {
			b.Fatal(err)
		}
	}
}

// DecodeParams says where a forwarder's trace context can go in the params it read
// without reading them again: the closing brace of _meta, or of params without one; and
// nowhere when _meta already names a trace context, in any spelling, or is null.
func TestDecodeParamsFindsWhereMetaEnds(t *testing.T) {
	for _, tc := range []struct {
		params string
		at     string // what params hold from the place on; "" for no place
		want   MetaEnd
	}{
		{`{"name":"x","arguments":{"_meta":{}}}`, "}", MetaEnd{Members: true}},
		{" {\n} ", "} ", MetaEnd{}},
		{`{"_meta":{"progressToken":1} , "name":"x"}`, `} , "name":"x"}`, MetaEnd{InMeta: true, Members: true}},
		{`{"name":"x","_meta":{ }}`, "}}", MetaEnd{InMeta: true}},
		{`{"\u005fmeta":{"k":"v"}}`, "}}", MetaEnd{InMeta: true, Members: true}},
		{`{"_meta":{"k":{"traceparent":1}}}`, "}}", MetaEnd{InMeta: true, Members: true}},
		{`{"_meta":{"TraceParent":"x"}}`, "", MetaEnd{}},
		{`{"_meta":{"k":1,"BAGGAGE":"x"}}`, "", MetaEnd{}},
		{`{"_meta":{"tracestate":"x"}}`, "", MetaEnd{}},
		{`{"_meta":{"\u0074raceparent":"x"}}`, "", MetaEnd{}}, // a name spelled with an escape is the name
		{`{"name":"x","_meta":null}`, "", MetaEnd{}},
		{``, "", MetaEnd{}},
	} {
		p, err := DecodeParams(json.RawMessage(tc.params))
		if err != nil {
			t.Fatalf("%s: %v", tc.params, err)
		}
		got := p.MetaEnd
		if tc.at == "" {
			if got != (MetaEnd{}) {
				t.Errorf("%s: a place to add to _meta at %+v, want none", tc.params, got)
			}
			continue
		}
		tc.want.Offset = len(tc.params) - len(tc.at)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v (%q from there)", tc.params, got, tc.want, tc.at)
		}
	}
}

func TestCheckBodyRefusesALoneMisspelledDecisiveMember(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progresstoken":"t"}}}`,
		// Unicode case folding, not ASCII's: the long s and the Kelvin sign fold to s and k.
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progre\u017fsToken":"t"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","_meta":{"progressTo\u212Aen":"t"}}}`,
	} {
		if _, err := CheckBody([]byte(body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckBody(%s) = %v, want an invalid message", body, err)
		}
	}
}

// wideObject is a params object with n members "m0".."m{n-1}" and, last, the member
// given (empty for none).
func wideObject(n int, last string) []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%d":%d`, i, i)
	}
	if last != "" {
		b.WriteString("," + last)
	}
	b.WriteString("}}}")
	return []byte(b.String())
}

func TestCheckBodyFindsCollisionsInWideObjects(t *testing.T) {
	for _, n := range []int{fewMembers - 1, fewMembers, fewMembers + 1, 1000} {
		for _, tc := range []struct{ last, why string }{
			{"", ""},
			{`"M3":0`, "differ only in case"},
			{`"m\u0033":0`, "appears twice"},
			{`"\u212A":0,"k":1`, "differ only in case"},
			{fmt.Sprintf(`"M%d":0`, n-1), "differ only in case"},
		} {
			_, err := CheckBody(wideObject(n, tc.last))
			switch {
			case tc.why == "" && err != nil:
				t.Errorf("%d members: CheckBody refused a valid body: %v", n, err)
			case tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)):
				t.Errorf("%d members and %s: CheckBody said %v, want %q", n, tc.last, err, tc.why)
			}
		}
	}
}

// BenchmarkCheckBodyWideObject reports what checking costs per member of one wide
// object: the figure stays flat as the object widens (it grew with the width, to
// minutes of CPU for one 4 MiB body, when every name was compared with every other).
func BenchmarkCheckBodyWideObject(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			body := wideObject(n, "")
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := CheckBody(body); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/member")
		})
	}
}

func TestCheckBodyReadsParamsAsTheyLieInTheBody(t *testing.T) {
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,2]}}}`,
		"{ \"jsonrpc\" : \"2.0\" ,\n\t\"params\" :\r\n {\"name\":\"a\",\"arguments\":{\"x\":[1,2]}} , \"id\" : 1, \"method\" : \"tools/call\" }",
		"[ {\"jsonrpc\":\"2.0\",\"method\":\"ping\"} ,\n {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":  {\"name\":\"a\",\"arguments\":{\"x\":[1,2]}}  } ]",
	} {
		b, err := CheckBody([]byte(body))
		if err != nil {
			t.Fatalf("CheckBody(%q): %v", body, err)
		}
		m := b.Messages[len(b.Messages)-1]
		if m.Method != "tools/call" || m.ID != testutil.ID(t, float64(1)) || string(m.Params) != `{"name":"a","arguments":{"x":[1,2]}}` {
			t.Errorf("CheckBody(%q) read method %q, id %v, params %q", body, m.Method, m.ID.Raw(), m.Params)
		}
		p, err := DecodeParams(m.Params)
		if err != nil || p.Name != "a" {
			t.Errorf("DecodeParams(%q) = %+v, %v", m.Params, p, err)
		}
	}
}

// FuzzCheckBody: CheckBody refuses whatever Check refuses, the params it hands on are
// one JSON object that DecodeParams reads as CheckBody did, and a message go-sdk decodes
// has the method and id go-sdk reads.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":1,"traceparent":"x"}}}`,
		`[{"jsonrpc":"2.0","method":"a"} , {"jsonrpc":"2.0","id":"x","result":{}}]`,
		"{ \"params\" :\n{\"uri\":\"u\"},\"method\":\"m\"}", `{"method":"m","params":{"_meta":null}}`,
		`{"jsonrpc":"2.0","id":"a\u00e9\"b","method":"t\/x"}`, `{"jsonrpc":"2.0","id":-12.0e1,"method":"x"}`, `{"jsonrpc":"2.0","id":null,"result":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := CheckBody(data)
		if err != nil {
			return
		}
		if err := Check(data); err != nil {
			t.Fatalf("CheckBody accepted %q, which Check refuses: %v", data, err)
		}
		if !b.Batch {
			if msg, err := jsonrpc.DecodeMessage(data); err == nil {
				var method string
				var id jsonrpc.ID
				switch msg := msg.(type) {
				case *jsonrpc.Request:
					method, id = msg.Method, msg.ID
				case *jsonrpc.Response:
					id = msg.ID
				}
				if m := b.Messages[0]; m.Method != method || m.ID != id {
					t.Fatalf("CheckBody(%q) read method %q and id %v, go-sdk %q and %v", data, m.Method, m.ID.Raw(), method, id.Raw())
				}
			}
		}
		for _, m := range b.Messages {
			if len(m.Params) == 0 {
				continue
			}
			if !json.Valid(m.Params) || m.Params[0] != '{' {
				t.Fatalf("CheckBody(%q) handed on params %q", data, m.Params)
			}
			if _, err := DecodeParams(m.Params); err != nil {
				t.Fatalf("DecodeParams refused the params %q of an accepted body %q: %v", m.Params, data, err)
			}
		}
	})
}
