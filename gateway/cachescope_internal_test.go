package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// A session's client reads a cacheable result with its own JSON decoder: Go's keeps the
// last of two members and matches names without regard to case. Whatever spelling or
// repetition of cacheScope a server sends, the client finds private and nothing else.
func TestKeepPrivateRawLeavesNoOtherReading(t *testing.T) {
	for _, tt := range []struct{ name, result string }{
		{"public", `{"tools":[],"cacheScope":"public"}`},
		{"duplicate, public last", `{"tools":[],"cacheScope":"private","cacheScope":"public"}`},
		{"another case", `{"tools":[],"CacheScope":"public"}`},
		{"both spellings", `{"tools":[],"cacheScope":"private","CACHESCOPE":"public"}`},
		{"escaped name", `{"tools":[],"cache\u0053cope":"public"}`},
		{"invalid UTF-8 elsewhere", "{\"tools\":[],\"note\":\"\xff\",\"cacheScope\":\"public\"}"},
	} {
		out := keepPrivateRaw(json.RawMessage(tt.result))
		// Every member, as a lenient decoder sees it.
		var members map[string]json.RawMessage
		if err := json.Unmarshal(out, &members); err != nil {
			t.Errorf("%s: the result %s no longer decodes: %v", tt.name, out, err)
			continue
		}
		scopes := 0
		for name := range members {
			if strings.EqualFold(name, "cacheScope") {
				scopes++
			}
		}
		var read struct {
			CacheScope string `json:"cacheScope"`
		}
		_ = json.Unmarshal(out, &read)
		if read.CacheScope != "private" || scopes != 1 {
			t.Errorf("%s: %s became %s; a client reads cacheScope %q from %d members, want private from one", tt.name, tt.result, out, read.CacheScope, scopes)
		}
	}
	for _, unchanged := range []string{`{"tools":[]}`, `{"tools":[],"cacheScope":"private"}`, `[1,2]`} {
		if out := keepPrivateRaw(json.RawMessage(unchanged)); string(out) != unchanged {
			t.Errorf("%s became %s; want it untouched", unchanged, out)
		}
	}
}
