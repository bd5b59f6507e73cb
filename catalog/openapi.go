package catalog

import (
	_ "embed"
	"net/http"
)

// openAPIDocument describes the REST API (OpenAPI 3.0). It is public: it is served
// without authentication and says nothing about any server.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI document served at /api/v1/openapi.json.
func OpenAPI() []byte {
	return append([]byte(nil), openAPIDocument...)
}

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, errorf(http.StatusMethodNotAllowed, "method %s is not allowed; use GET", r.Method))
		return
	}
	writeJSON(w, r, rawJSON(openAPIDocument))
}

// rawJSON is JSON that is written as it is.
type rawJSON []byte

// MarshalJSON returns the document itself.
func (j rawJSON) MarshalJSON() ([]byte, error) { return j, nil }
