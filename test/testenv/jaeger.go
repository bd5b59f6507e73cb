package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// JaegerEnv names the environment variable holding the Jaeger v2 binary
// hack/jaeger.sh builds.
const JaegerEnv = "SWITCHBOARD_JAEGER"

// Jaeger is a Jaeger v2 started for one test: an OTLP receiver and an in-memory trace
// store with its query API, all on loopback.
type Jaeger struct {
	// OTLPEndpoint is the base URL of its OTLP/HTTP receiver (http://127.0.0.1:PORT), the
	// value of OTEL_EXPORTER_OTLP_ENDPOINT.
	OTLPEndpoint string
	// QueryURL is the base URL of its query API and UI.
	QueryURL string
}

// jaegerConfig is Jaeger's configuration: OTLP over HTTP in, memory store, query API,
// every listener on loopback (its defaults listen on every interface), no telemetry of
// its own on a port.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// StartJaeger runs Jaeger for the test and returns it once its query API answers. It
// skips the test when SWITCHBOARD_JAEGER is not set; Jaeger dies with the test.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := os.Getenv(JaegerEnv)
	if bin == "" {
		t.Skipf("%s is not set: run with %s=\"$(hack/jaeger.sh)\"", JaegerEnv, JaegerEnv)
	}
	health, query, grpcPort, otlp := FreePort(t), FreePort(t), FreePort(t), FreePort(t)
	config := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, jaegerConfig, health, query, grpcPort, otlp), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+config) //nolint:noctx,gosec // the binary hack/jaeger.sh built; killed at cleanup
	p := startProcess(t, "jaeger", cmd)
	j := &Jaeger{OTLPEndpoint: "http://127.0.0.1:" + strconv.Itoa(otlp), QueryURL: "http://127.0.0.1:" + strconv.Itoa(query)}
	p.waitForHTTP(t, j.QueryURL+"/api/services")
	return j
}

// JaegerSpan is a span as Jaeger's query API (/api/traces) shows it.
type JaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs since the epoch
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
	// Service is the service.name of the span's process, filled in by Trace.
	Service string `json:"-"`
}

// Tag returns the span's tag key as text, or "".
func (s JaegerSpan) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Parent returns the id of the span's parent, or "".
func (s JaegerSpan) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace returns the spans of trace id as the query API shows them once it holds at
// least want of them (it receives them in batches), and its raw answer.
func (j *Jaeger) Trace(t testing.TB, id string, want int) ([]JaegerSpan, []byte) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		spans, raw, err := j.fetch(id)
		if err == nil && len(spans) >= want {
			return spans, raw
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger holds %d spans of trace %s, want %d (%v)", len(spans), id, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (j *Jaeger) fetch(id string) ([]JaegerSpan, []byte, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, j.QueryURL+"/api/traces/"+id, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, raw, fmt.Errorf("status %d", resp.StatusCode)
	}
	var body struct {
		Data []struct {
			Spans     []JaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, raw, err
	}
	var spans []JaegerSpan
	for _, d := range body.Data {
		for _, s := range d.Spans {
			s.Service = d.Processes[s.ProcessID].ServiceName
			spans = append(spans, s)
		}
	}
	return spans, raw, nil
}
