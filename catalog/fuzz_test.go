package catalog

import (
	"strings"
	"testing"
	"unicode/utf8"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func FuzzParseQuery(f *testing.F) {
	for _, seed := range []string{"", "weather forecast", "search_issues", "getUserInfo", "Créer UN fichier", strings.Repeat("ab ", 40)} {
		f.Add(seed)
	}
	ix := benchIndexSmall()
	f.Fuzz(func(t *testing.T, q string) {
		pq := parseQuery(q)
		if len(pq.terms) > maxTerms {
			t.Fatalf("%d terms", len(pq.terms))
		}
		for _, term := range pq.terms {
			if term == "" || len(term) > 4*maxWordBytes || (utf8.ValidString(q) && !utf8.ValidString(term)) {
				t.Fatalf("bad term %q from %q", term, q)
			}
		}
		// Searching never panics and respects the limit.
		if got, _ := ix.searchTools(pq, nil, 3, everyTool); len(got) > 3 {
			t.Fatalf("%d results for limit 3", len(got))
		}
	})
}

func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor("fp", cursor{Score: 42, Namespace: "ns", Name: "n", Tool: "t"}))
	f.Add("")
	f.Add("eyJ2IjoxfQ")
	f.Fuzz(func(t *testing.T, token string) {
		var c cursor
		if err := decodeCursor(token, "fp", &c); err == nil {
			// A token that decodes re-encodes to one that decodes to the same position.
			var again cursor
			if err := decodeCursor(encodeCursor("fp", c), "fp", &again); err != nil || again != c {
				t.Fatalf("round trip of %+v: %+v, %v", c, again, err)
			}
		}
	})
}

// benchIndexSmall is a small index for fuzzing.
func benchIndexSmall() *index {
	ix := newIndex()
	ix.upsert(newServerEntry(testServer("a", "weather", "Forecasts", mcpv1alpha1.ToolInfo{Name: "get_forecast", Title: "Weather forecast", Description: "Returns the forecast"})))
	ix.upsert(newServerEntry(testServer("b", "files", "", mcpv1alpha1.ToolInfo{Name: "créer_fichier", Title: "Créer", Description: "Crée un fichier"})))
	return ix
}
