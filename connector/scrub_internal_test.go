package connector

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// decodedStrings returns every string a JSON decoder makes of data, keys included, and
// every number as written.
func decodedStrings(t testing.TB, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%s is not JSON: %v", data, err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case json.Number:
			out = append(out, string(v))
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				out = append(out, k)
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

func TestScrubJSON(t *testing.T) {
	red := newRedactor([]string{`Bearer t"o/k-é`, `t"o/k-é`, "98765432"})
	tests := []struct {
		name string
		in   string
		want string // "" means unchanged
	}{
		{name: "no secret", in: `{"a":"b\n\"c\"","n":[1,2.5e3,true,null]}`},
		{name: "no escape at all", in: `{"text":"hello"}`},
		{name: "escaped quote and slash", in: `{"text":"Called with Bearer t\"o\/k-é!"}`, want: `{"text":"Called with [redacted]!"}`},
		{name: "every character escaped", in: `["\u0042\u0065arer t\u0022o\u002fk-\u00e9"]`, want: `["[redacted]"]`},
		{name: "upper-case hex", in: `["t\u0022o\u002Fk-\u00E9"]`, want: `["[redacted]"]`},
		{name: "key", in: `{"t\"o/k-é":1}`, want: `{"[redacted]":1}`},
		{name: "number", in: `{"n":9876543210,"m":1}`, want: `{"n":"[redacted]10","m":1}`},
		{name: "string spelling a number", in: `{"n":"id 98765432"}`, want: `{"n":"id [redacted]"}`},
		{name: "only the string that holds it", in: `{"a":"x\ny","b":"t\"o/k-é","c":"\u00e9"}`, want: `{"a":"x\ny","b":"[redacted]","c":"\u00e9"}`},
		{name: "across two strings is no secret", in: `["t\"o/k","-é"]`},
		{name: "escaped backslash before u", in: `["t\\u0022o/k-é"]`},
		{name: "surrogate pair", in: `["😀 t\"o/k-\u00e9 \ud83d\ude00"]`, want: `["😀 [redacted] 😀"]`},
		{name: "lone surrogate", in: `["\ud83d t\"o/k-é"]`, want: `["` + "\ufffd" + ` [redacted]"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed := scrubJSON(json.RawMessage(tt.in), red.lists())
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if string(got) != want || changed != (tt.want != "") {
				t.Errorf("scrubJSON(%s) = %s, %v; want %s", tt.in, got, changed, want)
			}
			if !json.Valid(got) {
				t.Errorf("scrubJSON(%s) = %s, not JSON", tt.in, got)
			}
		})
	}
}

// A secret with no character that a short escape stands for is found in a message's
// bytes as they are, unless a \u escape spells part of it.
func TestScrubJSONWithAPlainSecret(t *testing.T) {
	red := newRedactor([]string{"Bearer plain-token-1234", "plain-token-1234", "a/b/c-secret"})
	tests := []struct {
		in, want string
	}{
		{in: `["line\nplain-token-1234\"x\""]`, want: `["line\n[redacted]\"x\""]`},
		{in: `["plain\u002dtoken-1234"]`, want: `["[redacted]"]`},
		{in: `["\u0042earer plain-token-1234"]`, want: `["[redacted]"]`},
		{in: `["a\/b\/c-secret\n"]`, want: `["[redacted]\n"]`},
		{in: `["a/b/c-secret"]`, want: `["[redacted]"]`},
		{in: `["plain-token\n-1234","a\/b"]`, want: `["plain-token\n-1234","a\/b"]`},
	}
	for _, tt := range tests {
		got, _ := scrubJSON(json.RawMessage(tt.in), red.lists())
		if string(got) != tt.want {
			t.Errorf("scrubJSON(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestScrubMessage(t *testing.T) {
	red := newRedactor([]string{"s3cret-token"})
	id, _ := jsonrpc.MakeID("req s3cret-token")
	tests := []struct {
		name string
		msg  jsonrpc.Message
	}{
		{name: "request", msg: &jsonrpc.Request{ID: id, Method: "elicitation/create s3cret-token",
			Params: json.RawMessage(`{"message":"s3cret\u002dtoken"}`)}},
		{name: "response", msg: &jsonrpc.Response{ID: id, Result: json.RawMessage(`{"x":"s3cret-token"}`)}},
		{name: "error", msg: &jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: 1, Message: "bad s3cret-token",
			Data: json.RawMessage(`{"s3cret-token":"s3cret\u002dtoken"}`)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := red.scrubMessage(tt.msg)
			data, err := jsonrpc.EncodeMessage(out)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range decodedStrings(t, data) {
				if strings.Contains(s, "s3cret-token") {
					t.Errorf("%s still holds the secret in %q", data, s)
				}
			}
			if orig, _ := jsonrpc.EncodeMessage(tt.msg); !strings.Contains(string(orig), "s3cret") {
				t.Errorf("the original message was changed: %s", orig)
			}
		})
	}
	clean := &jsonrpc.Response{ID: mustID(t, float64(3)), Result: json.RawMessage(`{"x":"nothing\nhere"}`)}
	if out := newRedactor([]string{"s3cret-token"}).scrubMessage(clean); out != jsonrpc.Message(clean) {
		t.Errorf("a clean message was copied")
	}
}

// The redactor learns every token the token source issues: a message holding a token
// issued after the redactor was made is scrubbed.
func TestScrubMessageLearnsIssuedTokens(t *testing.T) {
	a := &tokenSource{}
	red := newRedactor(nil)
	red.issued = a.issuedSecrets
	for _, tok := range []string{"first-issued-token", "second-issued-token"} {
		a.remember(tok)
		out := red.scrubMessage(&jsonrpc.Response{ID: mustID(t, float64(1)), Result: json.RawMessage(`["` + tok + `"]`)})
		if got := string(out.(*jsonrpc.Response).Result); got != `["[redacted]"]` {
			t.Errorf("result with %s = %s", tok, got)
		}
	}
}

// FuzzScrubJSON checks that scrubbing valid JSON yields valid JSON in which no decoded
// string holds the secret.
func FuzzScrubJSON(f *testing.F) {
	// One secret that short escapes can spell, one that only \u escapes can, searched
	// from its "-".
	secrets := []string{`s"e/c-é`, "plain-tok-1234"}
	for _, seed := range []string{`{"a":"s\"e/c-é"}`, `["s\u0022e\/c-\u00e9"]`, `{"s\"e/c-é":[1,true]}`, `"x"`, `12`, `{"a":"\ud83d"}`,
		`["plain\u002dtok-1234"]`, `["xplain-tok-1234\n"]`, `["plain-tok-123"]`} {
		f.Add(seed)
	}
	for i, secret := range secrets {
		red := newRedactor([]string{secret})
		if anchor := red.configured.probes[0].anchor; (i == 1) != (anchor > 0) {
			f.Fatalf("secret %q is searched from byte %d", secret, anchor)
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		if !json.Valid([]byte(in)) {
			return
		}
		for _, secret := range secrets {
			out, _ := scrubJSON(json.RawMessage(in), newRedactor([]string{secret}).lists())
			if !json.Valid(out) {
				t.Fatalf("scrubJSON(%s) = %s, not JSON", in, out)
			}
			for _, s := range decodedStrings(t, out) {
				if strings.Contains(s, secret) {
					t.Fatalf("scrubJSON(%s) = %s still holds %q", in, out, secret)
				}
			}
		}
	})
}

// BenchmarkScrubMessage measures scrubbing a 4 KiB tools/call result that holds no
// secret, against a configured credential and two issued tokens: a credential as they
// usually are, and one with a quote, which makes every message with an escape be decoded
// to be searched.
func BenchmarkScrubMessage(b *testing.B) {
	result, err := json.Marshal(map[string]any{"content": []map[string]any{{"type": "text", "text": benchResultText}}})
	if err != nil {
		b.Fatal(err)
	}
	id, err := jsonrpc.MakeID(float64(1))
	if err != nil {
		b.Fatal(err)
	}
	msg := &jsonrpc.Response{ID: id, Result: result}
	for _, tc := range []struct{ name, credential string }{
		{"plain credential", "Bearer bench-secret-token-0123456789"},
		{"credential with a quote", `Bearer bench-secret-"token"-0123456789`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			a := &tokenSource{}
			a.remember("eyJhbGciOiJFUzI1NiJ9.first-issued-access-token.c2lnbmF0dXJl")
			a.remember("eyJhbGciOiJFUzI1NiJ9.second-issued-access-token.c2lnbmF0dXJl")
			red := newRedactor(Config{Headers: []Header{{Name: "Authorization", Value: tc.credential}}}.secrets())
			red.issued = a.issuedSecrets
			b.SetBytes(int64(len(result)))
			b.ReportAllocs()
			for b.Loop() {
				if red.scrubMessage(msg) != jsonrpc.Message(msg) {
					b.Fatal("a clean message was changed")
				}
			}
		})
	}
}

// An id that spells a secret, as a number or a string, is replaced: the client would
// show it.
func TestScrubMessageIDs(t *testing.T) {
	red := newRedactor([]string{"98765432"})
	for _, raw := range []any{float64(1987654321), "id-98765432"} {
		id := mustID(t, raw)
		out := red.scrubMessage(&jsonrpc.Request{ID: id, Method: "elicitation/create", Params: json.RawMessage(`{}`)})
		if got := out.(*jsonrpc.Request).ID.Raw(); strings.Contains(fmt.Sprint(got), "98765432") {
			t.Errorf("id %v became %v", raw, got)
		}
	}
	clean := &jsonrpc.Request{ID: mustID(t, float64(12345)), Method: "ping"}
	if red.scrubMessage(clean) != jsonrpc.Message(clean) {
		t.Error("a message with a clean numeric id was copied")
	}
}
