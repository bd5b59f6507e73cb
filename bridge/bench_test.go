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
	"sync"
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
// bridge's target is within 1.3x). The bare pipe (see floor_test.go) is the floor: what
// an HTTP hop in front of the same stdio server costs with nothing else done.
//
// The server is the helper Go server, fast and deterministic, so that the server's own
// cost does not hide the bridges'.
func BenchmarkBridgeToolsCall(b *testing.B) {
	argv, env := testServerCommand(b)
	for _, version := range []string{sessionEra.ProtocolVersion, "2026-07-28"} {
		b.Run("era="+version, func(b *testing.B) { benchmarkToolsCall(b, argv, env, version) })
	}
}

// BenchmarkBridgeToolsCallServerEverything is the same comparison against the npm
// reference server.
func BenchmarkBridgeToolsCallServerEverything(b *testing.B) {
	benchmarkToolsCall(b, serverEverything(b), os.Environ(), sessionEra.ProtocolVersion)
}

// BenchmarkBridgeToolsCallGoSDKConformanceServer measures what part of the bridge's cost
// go-sdk's Streamable HTTP transport itself is: go-sdk's conformance server, which
// serves stdio and Streamable HTTP from one binary, called over stdio directly, over
// Streamable HTTP directly (no bridge: the client and server transports the bridge's
// path also has), and over stdio behind the bridge in both modes.
func BenchmarkBridgeToolsCallGoSDKConformanceServer(b *testing.B) {
	bin := testenv.BuildGoBinary(b, testenv.GoSDKConformanceServer)
	for _, era := range []struct {
		version string
		start   func(testing.TB) string
	}{
		{sessionEra.ProtocolVersion, testenv.StartConformanceServer},
		{"2026-07-28", testenv.StartStatelessConformanceServer},
	} {
		b.Run("era="+era.version, func(b *testing.B) {
			benchmarkGoSDKConformanceServer(b, bin, era.start(b), era.version)
		})
	}
}

func benchmarkGoSDKConformanceServer(b *testing.B, bin, httpURL, version string) {
	paths := []*benchPath{
		{name: "direct stdio", session: connectCommand(b, []string{bin}, os.Environ(), version)},
		{name: "direct Streamable HTTP", session: connectURL(b, httpURL, version)},
		{name: "bridge PerSession", session: connectURL(b, testenv.StartBridgeBinary(b, []string{"--warm-processes", "0"}, []string{bin}, nil), version)},
		{name: "bridge Shared", session: connectURL(b, testenv.StartBridgeBinary(b, []string{"--session-mode", "Shared"}, []string{bin}, nil), version)},
		{name: "bare pipe", session: connectURL(b, startBarePipe(b, []string{bin}, os.Environ()), version)},
	}
	ctx := context.Background()
	call := func(cs *mcp.ClientSession) time.Duration {
		start := time.Now()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text", Arguments: map[string]any{}}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	for _, p := range paths {
		call(p.session)
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

// benchPath is one way to reach the server in a benchmark.
type benchPath struct {
	name    string
	session *mcp.ClientSession
	total   time.Duration
}

// benchmarkToolsCall compares the paths of BenchmarkBridgeToolsCall with clients asking
// for version.
func benchmarkToolsCall(b *testing.B, argv, env []string, version string) {
	ctx := context.Background()
	direct := connectCommand(b, argv, env, version)
	bridged := connectURL(b, testenv.StartBridgeBinary(b, []string{"--warm-processes", "0"}, argv, env), version)
	shared := connectURL(b, testenv.StartBridgeBinary(b, []string{"--session-mode", "Shared"}, argv, env), version)
	// The same protocol version as the bridge's: with 2026-07-28 and later, supergateway
	// starts a process per request rather than one per session.
	peer := startSupergateway(b, argv, env, bridged.InitializeResult().ProtocolVersion)
	paths := []*benchPath{
		{name: "direct stdio", session: direct},
		{name: "bridge PerSession", session: bridged},
		{name: "bridge Shared", session: shared},
		{name: "supergateway", session: peer},
		{name: "bare pipe", session: connectURL(b, startBarePipe(b, argv, env), bridged.InitializeResult().ProtocolVersion)},
	}

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
// Each session has an HTTP transport of its own, as an agent in its own process has:
// sessions sharing http.DefaultTransport (two idle connections per host) would dial a
// new connection for most calls once many call at once.
func connectURL(b *testing.B, url, protocolVersion string) *mcp.ClientSession {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	httpClient := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	b.Cleanup(httpClient.CloseIdleConnections)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: httpClient},
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

// BenchmarkBridgeSharedConcurrentClients measures what one shared process costs clients
// that call at once: the mean tools/call round trip of 64 clients calling concurrently
// through a Shared-mode bridge (the switchboard binary), against one client calling alone
// (target: within 1.5x). The tool waits 20 ms and returns, as tools that wait on a
// filesystem, a repository or the network do, so the figure shows whether the bridge
// and its one process serve calls side by side rather than one after another. The echo
// figures beside it are CPU-bound on this machine: 64 clients then share its cores.
func BenchmarkBridgeSharedConcurrentClients(b *testing.B) {
	argv, env := testServerCommand(b)
	url := testenv.StartBridgeBinary(b, []string{"--session-mode", "Shared", "--max-sessions", "128"}, argv, env)
	const clients = 64
	shared := make([]*mcp.ClientSession, clients)
	direct := make([]*mcp.ClientSession, clients)
	for i := range clients {
		// Sessions: Shared mode is about sessions sharing one process.
		shared[i] = connectURL(b, url, sessionEra.ProtocolVersion)
		direct[i] = connectCommand(b, argv, env, sessionEra.ProtocolVersion)
	}
	tools := []struct {
		name string
		args map[string]any
	}{
		{"sleep", map[string]any{"milliseconds": 20}},
		{"echo", map[string]any{"message": "ping"}},
	}
	call := func(cs *mcp.ClientSession, tool string, args map[string]any) time.Duration {
		start := time.Now()
		if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// allAtOnce has every session make one call at the same time and returns the sum of
	// their round trips.
	allAtOnce := func(sessions []*mcp.ClientSession, tool string, args map[string]any) time.Duration {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var total time.Duration
		for _, cs := range sessions {
			wg.Go(func() {
				took := call(cs, tool, args)
				mu.Lock()
				total += took
				mu.Unlock()
			})
		}
		wg.Wait()
		return total
	}
	alone := make([]time.Duration, len(tools))
	together := make([]time.Duration, len(tools))
	directTogether := make([]time.Duration, len(tools))
	n := 0
	for b.Loop() {
		for i, tool := range tools {
			alone[i] += call(shared[0], tool.name, tool.args)
			together[i] += allAtOnce(shared, tool.name, tool.args)
			directTogether[i] += allAtOnce(direct, tool.name, tool.args)
		}
		n++
	}
	for i, tool := range tools {
		aloneMean := alone[i] / time.Duration(n)
		togetherMean := together[i] / time.Duration(n*clients)
		directMean := directTogether[i] / time.Duration(n*clients)
		ratio := float64(togetherMean) / float64(aloneMean)
		b.ReportMetric(float64(aloneMean.Nanoseconds()), tool.name+"-1-client-ns/call")
		b.ReportMetric(float64(togetherMean.Nanoseconds()), tool.name+"-64-clients-ns/call")
		b.ReportMetric(ratio, tool.name+"-ratio")
		b.Logf("Shared mode, %s: one client %v a call, %d clients at once %v a call (%.2fx); "+
			"%d clients at once on direct stdio to a process each %v a call (%.2fx of one Shared client)",
			tool.name, aloneMean, clients, togetherMean, ratio, clients, directMean, float64(directMean)/float64(aloneMean))
	}
}

// connectCommand starts a go-sdk client session over stdio with a process of argv of its
// own, asking for protocolVersion (empty: the client's latest); it is closed when the
// benchmark ends.
func connectCommand(b *testing.B, argv, env []string, protocolVersion string) *mcp.ClientSession {
	b.Helper()
	cmd := exec.CommandContext(context.Background(), argv[0], argv[1:]...)
	cmd.Env = env
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "v1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cs.Close() })
	return cs
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
