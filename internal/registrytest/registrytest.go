// Package registrytest validates documents of the MCP Registry API in tests: answers
// against the registry's published OpenAPI document, server.json files against its
// published JSON schema, both copied under catalog/testdata/registry (see its README).
//
// It is for tests only and must not be imported by the manager's packages.
package registrytest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Dir returns the folder holding openapi.yaml and server.schema.json.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "catalog", "testdata", "registry")
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error

	openapiMu sync.Mutex
	openapi   validator.Validator
)

// serverSchema compiles server.schema.json once.
func serverSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		f, err := os.Open(filepath.Join(Dir(), "server.schema.json"))
		if err != nil {
			schemaErr = err
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		const id = "https://raw.githubusercontent.com/modelcontextprotocol/registry/main/docs/reference/server-json/draft/server.schema.json"
		if schemaErr = c.AddResource(id, doc); schemaErr != nil {
			return
		}
		schema, schemaErr = c.Compile(id)
	})
	return schema, schemaErr
}

// ValidateServerJSON fails tb unless raw is a server.json the registry's schema accepts.
func ValidateServerJSON(tb testing.TB, raw []byte) {
	tb.Helper()
	if err := CheckServerJSON(raw); err != nil {
		tb.Fatal(err)
	}
}

// CheckServerJSON returns why raw is not a server.json the registry's schema accepts.
func CheckServerJSON(raw []byte) error {
	s, err := serverSchema()
	if err != nil {
		return fmt.Errorf("compiling server.schema.json: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("server.json is not JSON: %w", err)
	}
	if err := s.Validate(doc); err != nil {
		return fmt.Errorf("server.json %s does not validate against server.schema.json: %w", raw, err)
	}
	return nil
}

// ValidateResponse fails tb unless the answer with status code, Content-Type and body
// to GET escapedPath (the path as sent, server names escaped) is one the registry's
// OpenAPI document allows, and every server in it validates against server.schema.json.
func ValidateResponse(tb testing.TB, escapedPath string, code int, contentType string, body []byte) {
	tb.Helper()
	openapiMu.Lock()
	defer openapiMu.Unlock()
	if openapi == nil {
		spec, err := os.ReadFile(filepath.Join(Dir(), "openapi.yaml"))
		if err != nil {
			tb.Fatal(err)
		}
		doc, err := libopenapi.NewDocument(spec)
		if err != nil {
			tb.Fatalf("parsing openapi.yaml: %v", err)
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			tb.Fatalf("building the OpenAPI validator: %v", errs)
		}
		openapi = v
	}
	path, query, _ := strings.Cut(escapedPath, "?")
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://registry.test"+escapedPath, nil)
	if err != nil {
		tb.Fatal(err)
	}
	// The validator matches the path segment by segment: keep an escaped server name
	// in one segment.
	req.URL.Path, req.URL.RawPath, req.URL.RawQuery = path, "", query
	resp := &http.Response{
		StatusCode: code,
		Header:     http.Header{"Content-Type": {contentType}},
		Body:       io.NopCloser(bytes.NewReader(body)),
		Request:    req,
	}
	if ok, errs := openapi.ValidateHttpResponse(req, resp); !ok {
		var msgs []string
		for _, e := range errs {
			msg := e.Message + ": " + e.Reason
			for _, se := range e.SchemaValidationErrors {
				msg += "; " + se.FieldPath + ": " + se.Reason
			}
			msgs = append(msgs, msg)
		}
		tb.Fatalf("GET %s answered %d %s, which the registry's OpenAPI document does not allow:\n%s", escapedPath, code, body, strings.Join(msgs, "\n"))
	}
	if code != http.StatusOK {
		return
	}
	var doc struct {
		Server  json.RawMessage `json:"server"`
		Servers []struct {
			Server json.RawMessage `json:"server"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		tb.Fatal(err)
	}
	if doc.Server != nil {
		ValidateServerJSON(tb, doc.Server)
	}
	for _, s := range doc.Servers {
		ValidateServerJSON(tb, s.Server)
	}
}
