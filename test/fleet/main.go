// Command fleet measures the manager at fleet scale: it starts a control plane (envtest,
// CRDs installed), go-sdk MCP servers on loopback and the real manager binary as a process
// of its own, applies N MCPServers with server-side apply in parallel, waits until every
// one is Ready with its tools in status, and prints what a person pastes into a note: the
// apply time, the time to all Ready after the apply finished, the manager's peak and
// current RSS, Go heap and goroutines, the cost per server over the same manager with no
// servers, and the writes (MCPServer resourceVersion changes, Events) of a quiet minute,
// which should be none.
//
// It is a benchmark program, not a test. Run it from the repository root:
//
//	go run ./test/fleet -servers 1000
//	go run ./test/fleet -servers 3000 -profile-dir /tmp/fleet-prof
//	go run ./test/fleet -servers 10000 -upstreams 4
//
// KUBEBUILDER_ASSETS is found as the tests find it (hack/envtest-assets.sh). Every
// server listens on 127.0.0.1 only; everything stops when the program ends.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

type options struct {
	servers      int
	upstreams    int
	tools        int
	namespace    string
	workers      int
	quiet        time.Duration
	settle       time.Duration
	readyTimeout time.Duration
	probe        time.Duration
	profileDir   string
	binary       string
	noList       bool
	managerArgs  string
	peers        int
	managerEnv   string
}

func main() {
	var o options
	flag.IntVar(&o.servers, "servers", 1000, "MCPServers to apply.")
	flag.IntVar(&o.upstreams, "upstreams", 1, "go-sdk MCP servers on loopback; MCPServers are spread round-robin over them.")
	flag.IntVar(&o.tools, "tools", 14, "Tools each MCP server offers.")
	flag.StringVar(&o.namespace, "namespace", "fleet", "Namespace of the MCPServers.")
	flag.IntVar(&o.workers, "apply-workers", 16, "Server-side applies in flight at once, as a GitOps tool would run them.")
	flag.DurationVar(&o.quiet, "quiet", time.Minute, "How long to count writes once everything is Ready; 0 skips it.")
	flag.DurationVar(&o.settle, "settle", 10*time.Second, "How long the manager runs with no servers before its baseline is read.")
	flag.DurationVar(&o.readyTimeout, "ready-timeout", 15*time.Minute, "How long to wait for every MCPServer to be Ready.")
	flag.DurationVar(&o.probe, "probe-interval", 30*time.Second, "spec.healthCheck.interval of every MCPServer, and the manager's --default-probe-interval.")
	flag.StringVar(&o.profileDir, "profile-dir", "", "Folder to save the manager's heap and goroutine profiles in (baseline and steady state); empty saves none.")
	flag.StringVar(&o.binary, "binary", "", "Manager binary to run; empty builds ./cmd/switchboard into a temporary folder.")
	flag.BoolVar(&o.noList, "no-list-changed", false, "The MCP servers announce no listChanged capability (go-sdk announces it by default).")
	flag.StringVar(&o.managerArgs, "manager-args", "", "Extra space-separated flags for the manager.")
	flag.IntVar(&o.peers, "peers", 0, "Shard peers to simulate with member Leases: the manager runs with --sharding=leases, owns about 1/(peers+1) of the servers and stands by for the rest.")
	flag.StringVar(&o.managerEnv, "manager-env", "", "Extra space-separated NAME=value environment variables for the manager only, such as GOMEMLIMIT=200MiB.")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.servers < 0 || o.upstreams < 1 || o.workers < 1 {
		return errors.New("-servers must be at least 0, -upstreams and -apply-workers at least 1")
	}
	work, err := os.MkdirTemp("", "fleet-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	binary := o.binary
	if binary == "" {
		logf("Building the manager")
		binary = filepath.Join(work, "switchboard")
		build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/switchboard")
		build.Dir = testenv.RepoRoot()
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building the manager: %w", err)
		}
	}

	logf("Starting the control plane")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig, err := writeKubeconfig(env, work)
	if err != nil {
		return err
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the apply is paced by its workers, not by client-side throttling
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace}}); err != nil {
		return err
	}

	stopPeers, err := startPeers(ctx, c, o)
	if err != nil {
		return err
	}
	defer stopPeers() // before the control plane stops

	urls, stopUpstreams, err := startUpstreams(o)
	if err != nil {
		return err
	}
	defer stopUpstreams()

	m, err := startManager(ctx, o, binary, kubeconfig)
	if err != nil {
		return err
	}
	defer m.stop()

	logf("Manager running (pid %d); letting it settle for %s", m.pid(), o.settle)
	if !sleep(ctx, o.settle) {
		return ctx.Err()
	}
	base, err := m.measure(ctx)
	if err != nil {
		return err
	}
	if err := m.saveProfiles(ctx, o.profileDir, "baseline"); err != nil {
		return err
	}

	tracker := newTracker(c, o.namespace, o.tools)
	trackCtx, stopTracking := context.WithCancel(ctx)
	defer stopTracking() // before the control plane stops
	go tracker.run(trackCtx)
	if err := tracker.waitSynced(ctx); err != nil {
		return err
	}

	logf("Applying %d MCPServers with %d workers", o.servers, o.workers)
	applyStart := time.Now()
	if err := applyServers(ctx, c, o, urls); err != nil {
		return err
	}
	applied := time.Now()
	applyTime := applied.Sub(applyStart)
	logf("Applied in %s; waiting for every server to be Ready", round(applyTime))

	readyCtx, cancelReady := context.WithTimeout(ctx, o.readyTimeout)
	defer cancelReady()
	// With -peers only the manager's own share gets a status; the rest stand by.
	owned := ownedByManager(o)
	if err := tracker.waitReady(readyCtx, owned, m.exited); err != nil {
		return fmt.Errorf("%w (%d of %d Ready with %d tools)", err, tracker.ready(), owned, o.tools)
	}
	allReady := time.Now()
	logf("All %d owned servers Ready %s after the apply finished", owned, round(allReady.Sub(applied)))

	ready, err := m.measure(ctx)
	if err != nil {
		return err
	}

	var quiet quietCount
	steady := ready
	if o.quiet > 0 {
		logf("Counting writes for %s", o.quiet)
		if quiet, err = countWrites(ctx, c, tracker, o); err != nil {
			return err
		}
		if steady, err = m.measure(ctx); err != nil {
			return err
		}
	}
	if err := m.saveProfiles(ctx, o.profileDir, "steady"); err != nil {
		return err
	}

	report(os.Stdout, o, base, ready, steady, applyTime, allReady.Sub(applied), allReady.Sub(applyStart), quiet)
	return nil
}

// writeKubeconfig writes an administrator's kubeconfig for the manager.
func writeKubeconfig(env *testenv.Environment, dir string) (string, error) {
	admin, err := env.AddUser(envtest.User{Name: "fleet-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, kubeconfig, 0o600)
}

// startUpstreams starts the go-sdk MCP servers, each a Streamable HTTP handler on its own
// loopback port, and returns their base URLs.
func startUpstreams(o options) ([]string, func(), error) {
	var urls []string
	var servers []*http.Server
	stop := func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for i := range o.upstreams {
		var opts *mcp.ServerOptions
		if o.noList {
			opts = &mcp.ServerOptions{Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}}
		}
		server := mcp.NewServer(&mcp.Implementation{Name: "fleet-upstream", Version: strconv.Itoa(i)}, opts)
		for t := range o.tools {
			mcp.AddTool(server, &mcp.Tool{
				Name:        fmt.Sprintf("tool_%02d", t),
				Description: fmt.Sprintf("Fleet tool number %d: echoes its text argument.", t),
			}, echo)
		}
		handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
		ln, err := listen()
		if err != nil {
			stop()
			return nil, nil, err
		}
		hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, hs)
		go func() { _ = hs.Serve(ln) }()
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, stop, nil
}

type echoIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type echoOut struct {
	Text string `json:"text"`
}

func echo(_ context.Context, _ *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, echoOut, error) {
	return nil, echoOut(in), nil
}

// serverName is the name of the i-th MCPServer.
func serverName(i int) string { return fmt.Sprintf("s-%05d", i) }

// applyServers applies every MCPServer with server-side apply from o.workers goroutines.
func applyServers(ctx context.Context, c client.Client, o options, urls []string) error {
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range o.workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= o.servers {
					return
				}
				u := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": mcpv1alpha1.GroupVersion.String(),
					"kind":       "MCPServer",
					"metadata":   map[string]any{"name": serverName(i), "namespace": o.namespace},
					"spec": map[string]any{
						"description": "Fleet benchmark server",
						"http": map[string]any{
							"url":               urls[i%len(urls)] + "/mcp/" + serverName(i),
							"protocol":          "StreamableHTTP",
							"allowInsecureHTTP": true,
						},
						"healthCheck": map[string]any{"interval": o.probe.String()},
					},
				}}
				err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("fleet"), client.ForceOwnership)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("applying %s: %w", serverName(i), err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// tracker follows the MCPServers of a namespace through a watch: which are Ready with
// their tools, and how many resourceVersion changes it has seen.
type tracker struct {
	c         client.WithWatch
	namespace string
	tools     int32

	mu       sync.Mutex
	state    map[string]bool // name -> Ready with the tools
	changes  int             // MODIFIED events seen
	synced   chan struct{}
	changed  chan struct{}
	syncOnce sync.Once
}

func newTracker(c client.WithWatch, namespace string, tools int) *tracker {
	return &tracker{
		c: c, namespace: namespace, tools: int32(tools), //nolint:gosec // a small flag value
		state: map[string]bool{}, synced: make(chan struct{}), changed: make(chan struct{}, 1),
	}
}

func (t *tracker) run(ctx context.Context) {
	for ctx.Err() == nil {
		var list mcpv1alpha1.MCPServerList
		if err := t.c.List(ctx, &list, client.InNamespace(t.namespace)); err != nil {
			if ctx.Err() != nil {
				return
			}
			logf("Listing MCPServers: %v", err)
			sleep(ctx, time.Second)
			continue
		}
		t.mu.Lock()
		clear(t.state)
		for i := range list.Items {
			t.state[list.Items[i].Name] = t.isReady(&list.Items[i])
		}
		t.mu.Unlock()
		t.syncOnce.Do(func() { close(t.synced) })
		t.poke()
		w, err := t.c.Watch(ctx, &mcpv1alpha1.MCPServerList{}, client.InNamespace(t.namespace),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			logf("Watching MCPServers: %v", err)
			sleep(ctx, time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*mcpv1alpha1.MCPServer)
			if !ok {
				break // an error event: list again
			}
			t.mu.Lock()
			switch ev.Type {
			case watch.Deleted:
				delete(t.state, s.Name)
			case watch.Modified:
				t.changes++
				t.state[s.Name] = t.isReady(s)
			default:
				t.state[s.Name] = t.isReady(s)
			}
			t.mu.Unlock()
			t.poke()
		}
		w.Stop()
	}
}

func (t *tracker) isReady(s *mcpv1alpha1.MCPServer) bool {
	c := apimeta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.Generation &&
		s.Status.ObservedGeneration == s.Generation && s.Status.ToolCount == t.tools
}

func (t *tracker) poke() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

func (t *tracker) waitSynced(ctx context.Context) error {
	select {
	case <-t.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *tracker) ready() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.state {
		if r {
			n++
		}
	}
	return n
}

func (t *tracker) modifications() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.changes
}

// waitReady waits until n servers are Ready, or the manager exits.
func (t *tracker) waitReady(ctx context.Context, n int, exited <-chan struct{}) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		if t.ready() >= n {
			return nil
		}
		select {
		case <-t.changed:
		case <-tick.C:
			logf("%d of %d Ready", t.ready(), n)
		case <-exited:
			return errors.New("the manager exited")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// quietCount is what was written while nothing changed.
type quietCount struct {
	serverWrites   int
	eventsCreated  int
	eventsModified int
	duration       time.Duration
}

// countWrites counts MCPServer resourceVersion changes and Events created or updated in
// the namespace during o.quiet.
func countWrites(ctx context.Context, c client.WithWatch, t *tracker, o options) (quietCount, error) {
	var list corev1.EventList
	if err := c.List(ctx, &list, client.InNamespace(o.namespace), client.Limit(1)); err != nil {
		return quietCount{}, err
	}
	w, err := c.Watch(ctx, &corev1.EventList{}, client.InNamespace(o.namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		return quietCount{}, err
	}
	defer w.Stop()
	before := t.modifications()
	q := quietCount{duration: o.quiet}
	timer := time.NewTimer(o.quiet)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return q, errors.New("the Event watch ended early")
			}
			switch ev.Type {
			case watch.Added:
				q.eventsCreated++
			case watch.Modified:
				q.eventsModified++
			}
		case <-timer.C:
			q.serverWrites = t.modifications() - before
			return q, nil
		case <-ctx.Done():
			return q, ctx.Err()
		}
	}
}

// manager is the manager process.
type manager struct {
	cmd       *exec.Cmd
	pprofURL  string
	readyzURL string
	exited    chan struct{}
	logPath   string
}

func startManager(ctx context.Context, o options, binary, kubeconfig string) (*manager, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	args := []string{
		"manager",
		"--kubeconfig", kubeconfig,
		"--default-egress", "all",
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--catalog-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--default-probe-interval", o.probe.String(),
	}
	args = append(args, shardArgs(o)...)
	args = append(args, strings.Fields(o.managerArgs)...)
	logFile, err := os.CreateTemp("", fmt.Sprintf("fleet-manager-%d-*.log", o.servers))
	if err != nil {
		return nil, err
	}
	logPath := logFile.Name()
	cmd := exec.CommandContext(ctx, binary, args...) //nolint:gosec // the binary this program built or was given
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), strings.Fields(o.managerEnv)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, err
	}
	m := &manager{
		cmd:       cmd,
		pprofURL:  fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", ports[2]),
		readyzURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0]),
		exited:    make(chan struct{}),
		logPath:   logPath,
	}
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(m.exited)
	}()
	logf("Manager log: %s", logPath)
	deadline := time.Now().Add(time.Minute)
	for {
		if code, err := httpGet(ctx, m.readyzURL, io.Discard); err == nil && code == http.StatusOK {
			return m, nil
		}
		select {
		case <-m.exited:
			return nil, fmt.Errorf("the manager exited; see %s", logPath)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.stop()
			return nil, fmt.Errorf("the manager is not ready after a minute; see %s", logPath)
		}
	}
}

func (m *manager) pid() int { return m.cmd.Process.Pid }

func (m *manager) stop() {
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.exited
	}
}

// figures are one reading of the manager's memory.
type figures struct {
	hwm, rss   int64 // bytes, from /proc/PID/status
	heapInuse  int64 // bytes, after a GC
	heapAlloc  int64
	stack      int64 // goroutine stacks in use
	goroutines int
}

func (m *manager) measure(ctx context.Context) (figures, error) {
	var f figures
	// A GC first (gc=1), so the heap figures are live objects.
	var heap bytes.Buffer
	if _, err := httpGet(ctx, m.pprofURL+"heap?debug=1&gc=1", &heap); err != nil {
		return f, err
	}
	for line := range strings.Lines(heap.String()) {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			f.heapInuse, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "# HeapAlloc = "); ok {
			f.heapAlloc, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok { // "# Stack = inuse / sys"
			inuse, _, _ := strings.Cut(v, " ")
			f.stack, _ = strconv.ParseInt(strings.TrimSpace(inuse), 10, 64)
		}
	}
	var g bytes.Buffer
	if _, err := httpGet(ctx, m.pprofURL+"goroutine?debug=1", &g); err != nil {
		return f, err
	}
	first, _, _ := strings.Cut(g.String(), "\n")
	f.goroutines, _ = strconv.Atoi(strings.TrimPrefix(first, "goroutine profile: total "))

	status, err := os.Open(fmt.Sprintf("/proc/%d/status", m.pid()))
	if err != nil {
		return f, err
	}
	defer func() { _ = status.Close() }()
	sc := bufio.NewScanner(status)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			continue
		}
		kib, _ := strconv.ParseInt(fields[0], 10, 64)
		switch key {
		case "VmHWM":
			f.hwm = kib << 10
		case "VmRSS":
			f.rss = kib << 10
		}
	}
	return f, sc.Err()
}

// saveProfiles saves the manager's heap and goroutine profiles into dir as
// <label>-heap.pb.gz, <label>-goroutine.pb.gz and <label>-goroutine.txt.
func (m *manager) saveProfiles(ctx context.Context, dir, label string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	for name, path := range map[string]string{
		"heap.pb.gz":      "heap?gc=1",
		"goroutine.pb.gz": "goroutine",
		"goroutine.txt":   "goroutine?debug=1",
	} {
		var buf bytes.Buffer
		if _, err := httpGet(ctx, m.pprofURL+path, &buf); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, label+"-"+name), buf.Bytes(), 0o600); err != nil {
			return err
		}
	}
	logf("Saved %s profiles in %s", label, dir)
	return nil
}

func report(w io.Writer, o options, base, ready, steady figures, apply, afterApply, total time.Duration, q quietCount) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	per := func(b, b0 int64) string {
		if o.servers == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f KiB", float64(b-b0)/1024/float64(o.servers))
	}
	perG := func(g, g0 int) string {
		if o.servers == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(g-g0)/float64(o.servers))
	}
	fmt.Fprintf(w, "\nFleet: %d MCPServers over %d go-sdk upstream(s), %d tools each, probe interval %s, listChanged %v, %d apply workers\n",
		o.servers, o.upstreams, o.tools, o.probe, !o.noList, o.workers)
	if o.peers > 0 {
		owned := ownedByManager(o)
		fmt.Fprintf(w, "  sharded with %d simulated peers: the manager owns %d servers and stands by for %d (per server divides by all %d)\n",
			o.peers, owned, o.servers-owned, o.servers)
	}
	fmt.Fprintf(w, "  apply (server-side, parallel)     %s\n", round(apply))
	fmt.Fprintf(w, "  all Ready after the apply         %s  (%s after the apply started)\n", round(afterApply), round(total))
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "", "0 servers", "all Ready", "steady", "per server")
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "VmHWM (peak RSS)", mib(base.hwm), mib(ready.hwm), mib(steady.hwm), per(steady.hwm, base.rss))
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "VmRSS", mib(base.rss), mib(ready.rss), mib(steady.rss), per(steady.rss, base.rss))
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "Go heap in use (GC'd)", mib(base.heapInuse), mib(ready.heapInuse), mib(steady.heapInuse), per(steady.heapInuse, base.heapInuse))
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "Go heap live objects", mib(base.heapAlloc), mib(ready.heapAlloc), mib(steady.heapAlloc), per(steady.heapAlloc, base.heapAlloc))
	fmt.Fprintf(w, "  %-22s %12s %12s %12s %12s\n", "goroutine stacks", mib(base.stack), mib(ready.stack), mib(steady.stack), per(steady.stack, base.stack))
	fmt.Fprintf(w, "  %-22s %12d %12d %12d %12s\n", "goroutines", base.goroutines, ready.goroutines, steady.goroutines, perG(steady.goroutines, base.goroutines))
	if q.duration > 0 {
		fmt.Fprintf(w, "  quiet %s: %d MCPServer writes, %d Events created, %d Events updated\n",
			q.duration, q.serverWrites, q.eventsCreated, q.eventsModified)
	}
	fmt.Fprintln(w, "  (per server: steady minus the same manager with 0 servers, divided by N; peak per server is VmHWM minus 0-server RSS)")
}

// listen listens on a free loopback port.
func listen() (net.Listener, error) {
	var lc net.ListenConfig
	return lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for range n {
		ln, err := listen()
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func httpGet(ctx context.Context, url string, w io.Writer) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.Copy(w, resp.Body)
	return resp.StatusCode, err
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
