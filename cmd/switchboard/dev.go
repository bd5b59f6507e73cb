package main

import (
	"context"
	"encoding/json"
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
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/demo"
	"github.com/switchboard-mcp/switchboard/internal/devcluster"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/kustomize"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// The dev samples (config/samples/dev) point at these loopback addresses; `switchboard
// dev` serves the demo servers there.
const (
	notesAddr = "127.0.0.1:18081" // Streamable HTTP, bearer token from the notes-token Secret
	clockAddr = "127.0.0.1:18082" // legacy SSE
	rogueAddr = "127.0.0.1:18089" // the server the samples' egress policy denies

	notesTokenSecret = "notes-token"
	notesTokenKey    = "authorization"

	// devFieldOwner is the field manager of the objects dev applies.
	devFieldOwner = "switchboard-dev"
)

// devOptions are the dev subcommand's flags.
type devOptions struct {
	stateDir    string
	crdDir      string
	samplesDir  string
	assetsDir   string
	catalogAddr string
	metricsAddr string
	settleWait  time.Duration
	verbose     bool
	// otlpEndpoint is where traces go by OTLP over HTTP; empty exports none.
	otlpEndpoint string
}

func (o *devOptions) bind(fs *flag.FlagSet) {
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	fs.StringVar(&o.stateDir, "dir", filepath.Join(cacheDir, "switchboard", "dev"),
		"Folder for the kubeconfig and the manager's log.")
	fs.StringVar(&o.crdDir, "crds", filepath.Join("config", "crd", "bases"),
		"Folder of the CRDs to install.")
	fs.StringVar(&o.samplesDir, "samples", filepath.Join("config", "samples", "dev"),
		"Kustomization of the demo objects to apply; empty applies nothing.")
	fs.StringVar(&o.assetsDir, "assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"Folder holding etcd and kube-apiserver; defaults to $KUBEBUILDER_ASSETS, else hack/envtest-assets.sh builds them.")
	fs.StringVar(&o.catalogAddr, "catalog-bind-address", "127.0.0.1:18080",
		"Address the catalogue listens on.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "127.0.0.1:18090",
		"Address the manager's Prometheus metrics listen on; 0 disables them.")
	fs.DurationVar(&o.settleWait, "settle-timeout", 2*time.Minute,
		"How long to wait for the demo servers to settle before printing their state.")
	fs.BoolVar(&o.verbose, "v", false, "Write the manager's log to the terminal too.")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "",
		"Base URL of an OTLP/HTTP collector (a local Jaeger: http://127.0.0.1:4318) to send the manager's, the gateway's and the stdio bridges' traces to; empty sends none.")
}

// runDev starts a control plane, the manager and the demo servers, applies the dev
// samples and runs until SIGINT, SIGTERM or SIGHUP, or until nothing reads its output any
// more (it was piped into a process that has exited), then stops everything it started.
func runDev(args []string) int {
	var opts devOptions
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	opts.bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	stopOnSignals(stop)
	out := &devOutput{w: os.Stdout, stop: stop}
	go watchOutputReader(ctx, os.Stdout, stop)
	if err := dev(ctx, out, opts); err != nil {
		fmt.Fprintf(os.Stderr, "switchboard dev: %v\n", err)
		return 1
	}
	return 0
}

// stopOnSignals ends the run through stop on the first SIGINT, SIGTERM or SIGHUP; later
// ones are ignored while dev stops what it started. It also takes SIGPIPE from the Go
// runtime, which otherwise kills a process whose write to a closed standard output pipe
// fails (`switchboard dev | tee log`, tee ended first) before it could stop its control
// plane: such a write now fails with EPIPE, which devOutput turns into a clean stop.
func stopOnSignals(stop context.CancelCauseFunc) {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	// The handlers stay until dev exits: a signal once stopping must not kill it before
	// it has stopped what it started, nor a write to a closed pipe while it does.
	go func() {
		for sig := range signals {
			if sig != syscall.SIGPIPE {
				stop(fmt.Errorf("%w: %s", errDevSignal, sig))
			}
		}
	}()
}

// errDevSignal is the cause of a stop asked for by a signal; errDevOutputClosed of one
// caused by an output nobody reads any more.
var (
	errDevSignal       = errors.New("received a signal")
	errDevOutputClosed = errors.New("nothing reads the output any more")
)

// devOutput is dev's standard output. The first write that fails (its reader is gone)
// stops the run through stop, and it drops whatever is written afterwards, so that
// stopping prints nothing more to a closed pipe.
type devOutput struct {
	mu     sync.Mutex
	w      io.Writer
	stop   context.CancelCauseFunc
	failed bool
}

// Write writes p, or drops it once a write has failed; it never returns an error, since
// the run is already stopping.
func (o *devOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.failed {
		return len(p), nil
	}
	if _, err := o.w.Write(p); err != nil {
		o.failed = true
		o.stop(fmt.Errorf("%w: %w", errDevOutputClosed, err))
	}
	return len(p), nil
}

func dev(ctx context.Context, out io.Writer, opts devOptions) (err error) {
	started := time.Now()
	if err := os.MkdirAll(opts.stateDir, 0o700); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(opts.stateDir, "manager.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	var logOut io.Writer = logFile
	if opts.verbose {
		logOut = io.MultiWriter(logFile, os.Stderr)
	}
	logger := zap.New(zap.WriteTo(logOut), zap.UseDevMode(true))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)

	// Fail before starting anything when the demo ports are taken or the samples do not render.
	objects, err := renderSamples(opts.samplesDir)
	if err != nil {
		return err
	}
	listeners, err := listenDemoServers()
	if err != nil {
		return err
	}
	defer closeAll(listeners)

	assets, err := controlPlaneAssets(ctx, out, opts.assetsDir)
	if err != nil {
		return err
	}
	step(out, "Starting etcd and kube-apiserver")
	// Started to the end even when dev is asked to stop meanwhile (it then stops at
	// once): the start takes seconds and bounds its own waits.
	cluster, err := devcluster.Start(context.WithoutCancel(ctx), devcluster.Options{
		EtcdPath:      filepath.Join(assets, "etcd"),
		APIServerPath: filepath.Join(assets, "kube-apiserver"),
		Dir:           filepath.Join(opts.stateDir, "control-plane"),
		LogDir:        opts.stateDir,
		CRDDirs:       []string{opts.crdDir},
	})
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		step(out, "Stopping the control plane")
		err = errors.Join(err, cluster.Stop())
	}()
	if ctx.Err() != nil { // stopped while the control plane started
		return nil
	}
	cfg := cluster.Config
	kubeconfig, err := writeDevKubeconfig(cluster, opts.stateDir)
	if err != nil {
		return err
	}

	servers, err := serveDemoServers(out, listeners, objects)
	if err != nil {
		return err
	}
	defer shutdownAll(servers)

	if opts.otlpEndpoint != "" {
		// The stdio bridges dev starts inherit it from this process's environment.
		if err := os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", opts.otlpEndpoint); err != nil {
			return err
		}
		provider, err := tracing.Setup(ctx, tracing.Options{ServiceName: "switchboard-manager", SamplingRatio: -1})
		if err != nil {
			return err
		}
		defer shutdownTracing(logger, provider)
		step(out, "Sending traces to %s", opts.otlpEndpoint)
	}

	managerCtx, stopManager := context.WithCancel(ctx)
	managerDone, err := startDevManager(managerCtx, out, cfg, opts)
	if err != nil {
		stopManager()
		return err
	}
	defer func() {
		// The manager ends the stdio bridges it started before returning.
		stopManager()
		if managerErr := <-managerDone; managerErr != nil {
			err = errors.Join(err, fmt.Errorf("manager: %w", managerErr))
		}
	}()

	c, err := client.New(cfg, client.Options{Scheme: mustScheme()})
	if err != nil {
		return err
	}
	if len(objects) > 0 {
		step(out, "Applying %s", opts.samplesDir)
		if err := applyAll(ctx, c, objects); err != nil {
			if ctx.Err() != nil { // stopped while applying
				return nil
			}
			return err
		}
		settle(ctx, out, c, objects, opts.settleWait)
	}

	endpoints := gatewayEndpoints(opts.catalogAddr, objects)
	notesURL := ""
	for _, e := range endpoints {
		if e.name == string(demo.Notes) && !e.toolset {
			notesURL = e.url
			step(out, "Calling the notes server's tools through the gateway with a go-sdk client, without a token")
			callNotesThroughGateway(ctx, out, notesURL)
		}
	}
	for _, e := range endpoints {
		if e.toolset {
			step(out, "Listing the tools of toolset %s and calling search_notes through it", e.name)
			callToolsetThroughGateway(ctx, out, e.url)
		}
	}

	fmt.Fprintf(out, `
Switchboard dev is up (%s). In another terminal:

  export KUBECONFIG=%s
  kubectl get mcps -A
  kubectl describe mcps -n switchboard-demo
  curl -s http://%s/api/v1/tools

Catalogue:      http://%s/api/v1 (REST), http://%s/mcp (MCP), no authentication
`, time.Since(started).Round(100*time.Millisecond), kubeconfig, opts.catalogAddr, opts.catalogAddr, opts.catalogAddr)
	printGatewayEndpoints(out, endpoints)
	metricsURL := "http://" + opts.metricsAddr + "/metrics"
	if opts.metricsAddr == "0" {
		metricsURL = "off (--metrics-bind-address=0)"
	}
	fmt.Fprintf(out, `Metrics:        %s
Manager log:    %s
`, metricsURL, logFile.Name())
	if notesURL != "" {
		printGatewayCurl(out, notesURL)
	}
	fmt.Fprint(out, "\nPress Ctrl-C to stop.\n")

	select {
	case <-ctx.Done():
	case managerErr := <-managerDone:
		managerDone <- managerErr // for the deferred wait
		// A manager that returned nil because the run was stopped (its context is the
		// run's, and select may see both at once) stopped with the run.
		if managerErr != nil || ctx.Err() == nil {
			if managerErr == nil {
				managerErr = errors.New("stopped on its own")
			}
			return fmt.Errorf("the manager stopped: %w (see %s)", managerErr, logFile.Name())
		}
	}
	fmt.Fprintln(out)
	step(out, "Stopping (%v)", context.Cause(ctx))
	return nil
}

// step prints one line of progress.
func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "==> "+format+"\n", args...)
}

// controlPlaneAssets returns the folder holding etcd and kube-apiserver: the given one, or
// what hack/envtest-assets.sh prints, which builds them on a first run and shows its
// progress on the terminal.
func controlPlaneAssets(ctx context.Context, out io.Writer, dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	script := filepath.Join("hack", "envtest-assets.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("no control plane binaries: set KUBEBUILDER_ASSETS or --assets, or run from the source tree (make dev)")
	}
	step(out, "Finding etcd and kube-apiserver (the first run builds them from source, about 10 minutes)")
	var printed strings.Builder
	cmd := exec.CommandContext(ctx, "bash", script, "--control-plane-only")
	cmd.Stdout = &printed
	cmd.Stderr = os.Stderr
	// The script runs go build: stop its whole process group, not only bash, when dev stops.
	cmd.SysProcAttr = childProcAttr()
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	return strings.TrimSpace(printed.String()), nil
}

// writeDevKubeconfig writes an administrator's kubeconfig for the control plane and
// returns its absolute path.
func writeDevKubeconfig(cluster *devcluster.ControlPlane, dir string) (string, error) {
	path, err := filepath.Abs(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		return "", err
	}
	user := devcluster.User{Name: "dev-admin", Groups: []string{"system:masters"}}
	if err := cluster.WriteKubeconfig(path, user); err != nil {
		return "", fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return path, nil
}

// startDevManager runs the manager in this process, as `switchboard manager` would with
// --stdio-runtime=local and --catalog-auth=none, and returns a channel that receives its
// result.
func startDevManager(ctx context.Context, out io.Writer, cfg *rest.Config, opts devOptions) (chan error, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The dev samples' stdio server runs `switchboard demo-server`: put this binary first
	// on the PATH the local runtime hands its bridges.
	if err := os.Setenv("PATH", filepath.Dir(self)+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return nil, err
	}
	managerOpts := managerOptions{
		metricsAddr:             opts.metricsAddr,
		metricsSecure:           false, // plain HTTP on loopback, like the catalogue in dev
		probeAddr:               "0",
		maxConcurrentReconciles: 8,
		maxConcurrentConnects:   16,
		defaultProbeInterval:    30 * time.Second,
		defaultEgress:           string(egress.PosturePublic),
		stdioRuntime:            "local",
		catalogAddr:             opts.catalogAddr,
		catalogAuth:             "none",
	}
	step(out, "Starting the manager (log: %s)", filepath.Join(opts.stateDir, "manager.log"))
	done := make(chan error, 1)
	go func() { done <- startManager(ctx, cfg, managerOpts) }()
	return done, nil
}

// renderSamples renders the kustomization in dir; an empty dir renders nothing.
func renderSamples(dir string) ([]*unstructured.Unstructured, error) {
	if dir == "" {
		return nil, nil
	}
	return kustomize.RenderDir(dir)
}

// applyAll server-side applies objects in order (the kustomization puts the Namespace
// first).
func applyAll(ctx context.Context, c client.Client, objects []*unstructured.Unstructured) error {
	for _, obj := range objects {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj.DeepCopy()),
			client.FieldOwner(devFieldOwner), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// settle waits until every applied MCPServer is Current or Failed by kstatus rules, or
// until wait passes, then prints them as kubectl get mcps would.
func settle(ctx context.Context, out io.Writer, c client.Client, objects []*unstructured.Unstructured, wait time.Duration) {
	step(out, "Waiting for the MCPServers to connect")
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var servers []mcpv1alpha1.MCPServer
	for {
		servers = servers[:0]
		settled := true
		for _, obj := range objects {
			if obj.GetKind() != "MCPServer" {
				continue
			}
			var server mcpv1alpha1.MCPServer
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &server); err != nil {
				settled = false
				break
			}
			servers = append(servers, server)
			settled = settled && isSettled(&server)
		}
		if settled {
			break
		}
		select {
		case <-ctx.Done():
			step(out, "Some servers have not settled after %s", wait)
			printServers(out, servers)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	printServers(out, servers)
}

// isSettled says whether the manager has reported on the server's current spec and
// kstatus sees it as done: Current (Ready) or Failed (Stalled, waiting for a person).
func isSettled(server *mcpv1alpha1.MCPServer) bool {
	ready := meta.FindStatusCondition(server.Status.Conditions, mcpv1alpha1.ConditionReady)
	if ready == nil || ready.ObservedGeneration != server.Generation {
		return false
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(server)
	if err != nil {
		return false
	}
	result, err := status.Compute(&unstructured.Unstructured{Object: u})
	return err == nil && (result.Status == status.CurrentStatus || result.Status == status.FailedStatus)
}

func printServers(out io.Writer, servers []mcpv1alpha1.MCPServer) {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	fmt.Fprintln(w, "    NAMESPACE\tNAME\tREADY\tREASON\tTRANSPORT\tTOOLS")
	for _, s := range servers {
		ready, reason := "Unknown", ""
		if cond := meta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady); cond != nil {
			ready, reason = string(cond.Status), cond.Reason
		}
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\t%s\t%d\n", s.Namespace, s.Name, ready, reason, s.Status.Transport, s.Status.ToolCount)
	}
	_ = w.Flush()
}

// demoListener is a demo server's listening socket and what it serves there.
type demoListener struct {
	net.Listener
	kind demo.Kind
}

// listenDemoServers opens the demo servers' loopback ports.
func listenDemoServers() ([]demoListener, error) {
	var listeners []demoListener
	for _, d := range []struct {
		addr string
		kind demo.Kind
	}{{notesAddr, demo.Notes}, {clockAddr, demo.Clock}, {rogueAddr, demo.Rogue}} {
		l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", d.addr)
		if err != nil {
			closeAll(listeners)
			return nil, fmt.Errorf("the demo %s server needs %s: %w", d.kind, d.addr, err)
		}
		listeners = append(listeners, demoListener{Listener: l, kind: d.kind})
	}
	return listeners, nil
}

// serveDemoServers serves the demo servers on their listeners. The notes server accepts
// exactly the Authorization value of the samples' notes-token Secret.
func serveDemoServers(out io.Writer, listeners []demoListener, objects []*unstructured.Unstructured) ([]*http.Server, error) {
	token, err := sampleSecretValue(objects, notesTokenSecret, notesTokenKey)
	if err != nil {
		return nil, err
	}
	step(out, "Serving the demo MCP servers on 127.0.0.1")
	var servers []*http.Server
	for _, l := range listeners {
		mux := http.NewServeMux()
		switch l.kind {
		case demo.Clock:
			mux.Handle("/sse", demo.SSEHandler(l.kind))
		case demo.Notes:
			mux.Handle("/mcp", demo.StreamableHandler(l.kind, token))
		default:
			mux.Handle("/mcp", demo.StreamableHandler(l.kind, ""))
		}
		server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = server.Serve(l) }()
		servers = append(servers, server)
	}
	return servers, nil
}

// sampleSecretValue returns a key of a Secret among the samples, or "" when the samples
// have no such Secret (the notes server then asks for no token).
func sampleSecretValue(objects []*unstructured.Unstructured, name, key string) (string, error) {
	for _, obj := range objects {
		if obj.GetKind() != "Secret" || obj.GetName() != name {
			continue
		}
		var secret corev1.Secret
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &secret); err != nil {
			return "", err
		}
		if v, ok := secret.StringData[key]; ok {
			return v, nil
		}
		return string(secret.Data[key]), nil
	}
	return "", nil
}

func closeAll(listeners []demoListener) {
	for _, l := range listeners {
		_ = l.Close()
	}
}

func shutdownAll(servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(ctx)
	}
}

func mustScheme() *runtime.Scheme {
	scheme, err := newScheme()
	if err != nil {
		panic(err)
	}
	return scheme
}

// gatewayEndpoint is one sample server's MCP endpoint on the gateway.
type gatewayEndpoint struct {
	name, url string
	toolset   bool
}

// gatewayEndpoints returns the gateway URL of every MCPServer and MCPToolset among the
// samples, in the samples' order.
func gatewayEndpoints(catalogAddr string, objects []*unstructured.Unstructured) []gatewayEndpoint {
	var endpoints []gatewayEndpoint
	for _, obj := range objects {
		switch obj.GetKind() {
		case "MCPServer":
			endpoints = append(endpoints, gatewayEndpoint{
				name: obj.GetName(),
				url:  "http://" + catalogAddr + gatewaypath.Server(obj.GetNamespace(), obj.GetName()),
			})
		case "MCPToolset":
			endpoints = append(endpoints, gatewayEndpoint{
				name: obj.GetName(), toolset: true,
				url: "http://" + catalogAddr + gatewaypath.Toolset(obj.GetNamespace(), obj.GetName()),
			})
		}
	}
	return endpoints
}

func printGatewayEndpoints(w io.Writer, endpoints []gatewayEndpoint) {
	if len(endpoints) == 0 {
		return
	}
	fmt.Fprintln(w, "Gateway:        one MCP endpoint (Streamable HTTP) per server and per toolset, no authentication:")
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, e := range endpoints {
		name := e.name
		if e.toolset {
			name += " (toolset)"
		}
		fmt.Fprintf(tw, "                  %s\t%s\n", name, e.url)
	}
	_ = tw.Flush()
}

// The note dev saves through the gateway, so that search_notes, called by dev and by the
// curl lines it prints, has something to find.
const (
	demoNoteTitle = "Hello from the gateway"
	demoNoteBody  = "Saved by switchboard dev through the gateway, which sent the notes token for it."
	demoNoteQuery = "gateway"
)

// callNotesThroughGateway calls add_note and then search_notes on the notes server
// through its gateway endpoint, as an agent would, and prints what they answer. The
// client holds no token: the notes server answers 401 without one, so an answer shows
// that the gateway added the Secret's. A failure is printed, not returned: the rest of
// the demo works without it.
func callNotesThroughGateway(ctx context.Context, w io.Writer, url string) {
	if err := callNotes(ctx, w, url); err != nil {
		fmt.Fprintf(w, "    could not call the notes server through the gateway: %v\n", err)
	}
}

// connectDemoClient connects an MCP client, as an agent would, to a gateway url. It
// makes a few calls and is done: no standalone stream to wait on server messages.
func connectDemoClient(ctx context.Context, url string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-dev", Version: "v1"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
}

func callNotes(ctx context.Context, w io.Writer, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	session, err := connectDemoClient(ctx, url)
	if err != nil {
		return err
	}
	defer session.Close()
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"add_note", map[string]any{"title": demoNoteTitle, "body": demoNoteBody}},
		{"search_notes", map[string]any{"query": demoNoteQuery}},
	} {
		res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
		if err != nil {
			return fmt.Errorf("%s: %w", call.tool, err)
		}
		if res.IsError {
			return fmt.Errorf("%s answered an error: %s", call.tool, resultText(res))
		}
		args, err := json.Marshal(call.args)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "    %s %s\n      -> %s\n", call.tool, args, resultText(res))
	}
	return nil
}

// callToolsetThroughGateway lists a toolset's tools through its gateway endpoint and
// calls search_notes, as an agent would, printing what it gets. A failure is printed,
// not returned.
func callToolsetThroughGateway(ctx context.Context, w io.Writer, url string) {
	if err := callToolset(ctx, w, url); err != nil {
		fmt.Fprintf(w, "    could not use the toolset through the gateway: %v\n", err)
	}
}

func callToolset(ctx context.Context, w io.Writer, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	session, err := connectDemoClient(ctx, url)
	if err != nil {
		return err
	}
	defer session.Close()
	list, err := session.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	names := make([]string, len(list.Tools))
	for i, t := range list.Tools {
		names[i] = t.Name
	}
	fmt.Fprintf(w, "    tools: %s\n", strings.Join(names, " "))
	args := map[string]any{"query": demoNoteQuery}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: args})
	if err != nil {
		return fmt.Errorf("search_notes: %w", err)
	}
	fmt.Fprintf(w, "    search_notes (toolset) {\"query\":%q}\n      -> %s\n", demoNoteQuery, resultText(res))
	return nil
}

// resultText is what a tool answered, as a person would read it.
func resultText(res *mcp.CallToolResult) string {
	var texts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			texts = append(texts, t.Text)
		}
	}
	if len(texts) == 0 && res.StructuredContent != nil {
		if data, err := json.Marshal(res.StructuredContent); err == nil {
			texts = append(texts, string(data))
		}
	}
	return strings.Join(texts, " ")
}

// printGatewayCurl prints a curl session with the notes server through the gateway
// that a person can paste into bash or zsh: initialize, notifications/initialized,
// tools/call search_notes, then end the session.
func printGatewayCurl(w io.Writer, url string) {
	fmt.Fprintf(w, `
Call search_notes through the gateway yourself, without the notes token (bash or zsh; in a
cluster add -H "Authorization: Bearer $TOKEN" with your ServiceAccount's token):

  URL=%s
  H=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25')
  SID=$(curl -s -o /dev/null -D - "${H[@]}" "$URL" -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}' | awk 'tolower($1) == "mcp-session-id:" {print $2}' | tr -d '\r')
  curl -s "${H[@]}" -H "Mcp-Session-Id: $SID" "$URL" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  curl -s "${H[@]}" -H "Mcp-Session-Id: $SID" "$URL" -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_notes","arguments":{"query":"%s"}}}'
  curl -s -X DELETE -H "Mcp-Session-Id: $SID" "$URL"
`, url, demoNoteQuery)
}
