package bridge_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// The bare pipe is the benchmarks' floor for any stdio bridge: an HTTP endpoint that
// hands each POST body to one server process's stdin as a line and answers with the
// process's line that carries the same id, as application/json. It decodes nothing but
// the id, keeps no session state, checks nothing, and serves one client; whatever a real
// bridge costs beyond it is the bridge's own work, and what it costs over direct stdio is
// what the HTTP hop alone costs on this machine. It is not a bridge anyone should use.
//
// The test binary becomes the bare pipe when floorEnv holds the address to listen on;
// the server's argv follows floorArgvEnv (JSON).
const (
	floorEnv     = "SWITCHBOARD_BRIDGE_BENCH_FLOOR"
	floorArgvEnv = "SWITCHBOARD_BRIDGE_BENCH_FLOOR_ARGV"
)

// startBarePipe runs the bare pipe in a process of its own in front of argv with env, as
// the bridge runs, and returns its MCP endpoint.
func startBarePipe(b *testing.B, argv, env []string) string {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	rawArgv, err := json.Marshal(argv)
	if err != nil {
		b.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(b))
	cmd := exec.Command(exe) //nolint:noctx // killed at cleanup
	cmd.Env = append(slices.Clone(env), floorEnv+"="+addr, floorArgvEnv+"="+string(rawArgv))
	base := "http://" + addr
	testenv.StartHTTPServerProcess(b, "the bare pipe", cmd, base+"/healthz")
	return base + "/mcp"
}

// runBarePipe serves the bare pipe until the process is killed.
func runBarePipe(addr string) error {
	var argv []string
	if err := json.Unmarshal([]byte(os.Getenv(floorArgvEnv)), &argv); err != nil {
		return fmt.Errorf("%s: %w", floorArgvEnv, err)
	}
	if len(argv) == 0 {
		return fmt.Errorf("%s names no command", floorArgvEnv)
	}
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx,gosec // the benchmark's own server
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, floorEnv+"=") || strings.HasPrefix(kv, floorArgvEnv+"=")
	})
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &barePipe{stdin: stdin, waiting: map[string]chan []byte{}}
	go p.readAnswers(stdout)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("GET /mcp", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusMethodNotAllowed) })
	mux.HandleFunc("DELETE /mcp", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /mcp", p.servePOST)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

type barePipe struct {
	mu      sync.Mutex
	stdin   io.Writer
	waiting map[string]chan []byte // by the JSON text of the id
}

// idOnly is all the bare pipe reads of a message.
type idOnly struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (p *barePipe) servePOST(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var msg idOnly
	if err == nil {
		err = json.Unmarshal(body, &msg)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var answer chan []byte
	if len(msg.ID) > 0 {
		answer = make(chan []byte, 1)
	}
	p.mu.Lock()
	if answer != nil {
		p.waiting[string(msg.ID)] = answer
	}
	_, err = p.stdin.Write(append(body, '\n'))
	p.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if answer == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	line := <-answer
	w.Header().Set("Content-Type", "application/json")
	if msg.Method == "initialize" {
		w.Header().Set("Mcp-Session-Id", "bare-pipe")
	}
	_, _ = w.Write(line)
}

// readAnswers hands each answer the process writes to the request waiting for it and
// drops everything else.
func (p *barePipe) readAnswers(stdout io.Reader) {
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	for lines.Scan() {
		var msg idOnly
		if json.Unmarshal(lines.Bytes(), &msg) != nil || msg.Method != "" || len(msg.ID) == 0 {
			continue
		}
		p.mu.Lock()
		answer := p.waiting[string(msg.ID)]
		delete(p.waiting, string(msg.ID))
		p.mu.Unlock()
		if answer != nil {
			answer <- bytes.Clone(lines.Bytes())
		}
	}
	err := lines.Err()
	if err == nil {
		err = errors.New("the server closed its stdout")
	}
	fmt.Fprintln(os.Stderr, "bare pipe:", err)
	os.Exit(1)
}
