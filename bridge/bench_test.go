package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// BenchmarkBridgeToolsCall compares one tools/call round trip through the bridge with the
// same call over a direct stdio connection (go-sdk's CommandTransport) to the same server
// command, and through the npm supergateway bridge (stateful stdio to Streamable HTTP) as
// a peer. The bridge is the switchboard binary, in a process of its own as in a pod (and
// as supergateway is). Each iteration makes one call each way, in rotating order, so that
// all see the same machine load; it reports the means and their ratios to direct (the
// bridge's target is within 1.3x).
//
// The server is the helper Go server, fast and deterministic, so that the server's own
// cost does not hide the bridges'.
func BenchmarkBridgeToolsCall(b *testing.B) {
	argv, env := testServerCommand(b)
	benchmarkToolsCall(b, argv, env)
}

// BenchmarkBridgeToolsCallServerEverything is the same comparison against the npm
// reference server.
func BenchmarkBridgeToolsCallServerEverything(b *testing.B) {
	benchmarkToolsCall(b, serverEverything(b), os.Environ())
}

// benchPath is one way to reach the server in a benchmark.
type benchPath struct {
	name    string
	session *mcp.ClientSession
	total   time.Duration
}

func benchmarkToolsCall(b *testing.B, argv, env []string) {
	ctx := context.Background()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	direct, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()
	bridged := connectURL(b, testenv.StartBridgeBinary(b, []string{"--warm-processes", "0"}, argv, env), "")
	// The same protocol version as the bridge's session: with 2026-07-28 and later,
	// supergateway starts a process per request rather than one per session.
	peer := startSupergateway(b, argv, env, bridged.InitializeResult().ProtocolVersion)
	paths := []*benchPath{{name: "direct stdio", session: direct}, {name: "bridge", session: bridged}, {name: "supergateway", session: peer}}

	call := func(cs *mcp.ClientSession) time.Duration {
		// Fresh params each time: the client writes protocol metadata into them.
		params := &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "ping"}}
		start := time.Now()
		if _, err := cs.CallTool(ctx, params); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for _, p := range paths {
		call(p.session) // warm up every path
	}
	n := 0
	for b.Loop() {
		for i := range paths {
			p := paths[(n+i)%len(paths)]
			p.total += call(p.session)
		}
		n++
	}
	reportPaths(b, n, "call", paths)
}

// reportPaths reports each path's mean per operation and its ratio to the first path's.
func reportPaths(b *testing.B, n int, op string, paths []*benchPath) {
	base := paths[0].total / time.Duration(n)
	summary := make([]string, 0, len(paths))
	for i, p := range paths {
		mean := p.total / time.Duration(n)
		unit := strings.ReplaceAll(p.name, " ", "-")
		b.ReportMetric(float64(mean.Nanoseconds()), unit+"-ns/"+op)
		if i == 0 {
			summary = append(summary, fmt.Sprintf("%s %v", p.name, mean))
			continue
		}
		ratio := float64(mean) / float64(base)
		b.ReportMetric(ratio, unit+"-ratio")
		summary = append(summary, fmt.Sprintf("%s %v (%.2fx)", p.name, mean, ratio))
	}
	if n >= 100 {
		b.Logf("%s round trip over %d: %s", op, n, strings.Join(summary, ", "))
	}
}

// connectURL starts a go-sdk client session with the MCP endpoint url, asking for
// protocolVersion (empty: the client's latest); it is closed when the benchmark ends.
func connectURL(b *testing.B, url, protocolVersion string) *mcp.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		b.Fatalf("connecting to %s: %v", url, err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
}

// startSupergateway runs the npm supergateway bridge in stateful stdio to Streamable HTTP
// mode in front of argv with env (nil: the benchmark's own), and returns a client session
// through it that asks for protocolVersion. supergateway has no option to choose the
// listen address, so it listens on a free port on all interfaces; the session connects
// over 127.0.0.1. At the end the session is closed, supergateway gets SIGTERM (it then
// stops the server processes it started, each in a process group of its own) and its
// process group gets SIGKILL.
func startSupergateway(b *testing.B, argv, env []string, protocolVersion string) *mcp.ClientSession {
	b.Helper()
	entry, err := testenv.Supergateway()
	if err != nil {
		b.Fatalf("finding supergateway: %v", err)
	}
	port := freePort(b)
	quoted := make([]string, len(argv))
	for i, arg := range argv {
		quoted[i] = shellQuote(arg) // supergateway runs the command with a shell
	}
	cmd := exec.Command("node", entry,
		"--stdio", strings.Join(quoted, " "),
		"--outputTransport", "streamableHttp",
		"--stateful",
		"--port", fmt.Sprint(port),
		"--streamableHttpPath", "/mcp",
		"--healthEndpoint", "/healthz",
		"--logLevel", "none",
	)
	cmd.Env = env
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		b.Fatalf("starting supergateway: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for !healthy(base + "/healthz") {
		select {
		case <-exited:
			b.Fatalf("supergateway exited before serving:\n%s", output.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("supergateway did not serve within 30s:\n%s", output.String())
		}
	}
	return connectURL(b, base+"/mcp", protocolVersion) // closed before the process is stopped
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort(b *testing.B) int {
	b.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// healthy reports whether url answers 200.
func healthy(url string) bool {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// BenchmarkBridgeNewSession measures how long a new client waits for its session
// (initialize and its answer) with the npm reference server, whose Node.js process takes
// a while to boot: with no warm process, and with one kept started ahead
// (Options.WarmProcesses). Each iteration opens one session each way and ends both with
// DELETE; the cold one goes first, so that the warm bridge's replacement spare has had
// the time to boot that it has when agents do not arrive back to back.
func BenchmarkBridgeNewSession(b *testing.B) {
	argv := serverEverything(b)
	cold := startBridge(b, bridge.Options{Command: argv, MaxSessions: 64, GracePeriod: time.Second})
	warm := startBridge(b, bridge.Options{Command: argv, MaxSessions: 64, GracePeriod: time.Second, WarmProcesses: 1})
	bridges := []*running{cold, warm}
	totals := make([]time.Duration, len(bridges))
	connect := func(r *running) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		cs, err := r.connect(ctx)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		_ = cs.Close()
		return took
	}
	n := 0
	for b.Loop() {
		for i, r := range bridges {
			totals[i] += connect(r)
		}
		n++
	}
	coldMean, warmMean := totals[0]/time.Duration(n), totals[1]/time.Duration(n)
	b.ReportMetric(float64(coldMean.Nanoseconds()), "cold-ns/session")
	b.ReportMetric(float64(warmMean.Nanoseconds()), "warm-ns/session")
	b.Logf("new session (initialize) with server-everything: no warm process %v, one warm process %v (%.2fx)",
		coldMean, warmMean, float64(warmMean)/float64(coldMean))
}
