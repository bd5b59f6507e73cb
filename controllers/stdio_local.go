package controllers

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
)

// Local process timings.
const (
	// localReadyWait bounds how long Ensure waits for a freshly started bridge to answer
	// /readyz, so that the common case needs no requeue and Reconcile never waits long.
	localReadyWait = 2 * time.Second
	// defaultLocalPollInterval is how often a bridge that is not ready yet is looked at
	// again when LocalRuntime.PollInterval is zero.
	defaultLocalPollInterval = 500 * time.Millisecond
	// localStopGrace is how long a stopped bridge gets to wind its servers down after
	// SIGTERM before its process group is killed.
	localStopGrace = 5 * time.Second
)

// LocalRuntime runs each stdio server's bridge as a local process on a loopback port,
// with the same `switchboard bridge` command line the pod runtime puts in a Deployment.
// It is for `switchboard dev` and tests, where no kubelet runs pods: processes are not
// confined, so egress policies do not govern what the server itself reaches. Fields that
// only a pod can honour (resources, serviceAccountName, securityContext) are not applied:
// every process runs as the manager's own user, and the WorkloadAvailable message says
// so when a securityContext asks for something else.
//
// It is a manager Runnable: when the manager stops, every process is stopped.
type LocalRuntime struct {
	// Binary is the switchboard executable whose bridge subcommand runs the server.
	Binary string
	// Reader resolves env values that come from Secrets and ConfigMaps.
	Reader client.Reader
	// Logger receives process starts, exits and the bridge's own log lines.
	Logger logr.Logger
	// PollInterval is how soon a server whose bridge is not ready yet is looked at
	// again: no watch tells when a local process becomes ready. Zero means 500ms.
	PollInterval time.Duration

	mu    sync.Mutex
	procs map[connector.Key]*localProcess
}

// localProcess is one running bridge.
type localProcess struct {
	fingerprint string
	cmd         *exec.Cmd
	endpoint    string
	readyURL    string
	exited      chan struct{} // closed once the process has been waited for
}

// Ensure starts the server's bridge, or restarts it when its command, arguments,
// environment, maxSessions or sessionMode changed or it exited, and reports whether it
// answers /readyz.
func (l *LocalRuntime) Ensure(ctx context.Context, obj *mcpv1alpha1.MCPServer, _ *egress.ServerRules) (WorkloadStatus, error) {
	key := connector.Key{Namespace: obj.Namespace, Name: obj.Name}
	env, err := l.resolveEnv(ctx, obj)
	if err != nil {
		return WorkloadStatus{}, err
	}
	fingerprint := localFingerprint(obj.Spec.Stdio, env)

	l.mu.Lock()
	if l.procs == nil {
		l.procs = map[connector.Key]*localProcess{}
	}
	p := l.procs[key]
	restart := p == nil || p.fingerprint != fingerprint || p.hasExited()
	var stale *localProcess
	if restart {
		stale = p
		p, err = l.start(obj, env, fingerprint)
		if err != nil {
			delete(l.procs, key)
		} else {
			l.procs[key] = p
		}
	}
	l.mu.Unlock()
	if stale != nil {
		go stale.stop()
	}
	if err != nil {
		return WorkloadStatus{}, err
	}

	wait := time.Duration(0)
	if restart {
		wait = localReadyWait
	}
	status := WorkloadStatus{Endpoint: p.endpoint}
	if p.ready(ctx, wait) {
		status.Available = true
		status.Message = fmt.Sprintf("Local bridge process %d serves %s (the local runtime does not confine egress%s)", p.cmd.Process.Pid, p.endpoint, localIgnoredNote(obj.Spec.Stdio))
	} else {
		status.Message = fmt.Sprintf("Local bridge process %d is not ready yet", p.cmd.Process.Pid)
		status.RequeueAfter = l.PollInterval
		if status.RequeueAfter <= 0 {
			status.RequeueAfter = defaultLocalPollInterval
		}
	}
	return status, nil
}

// Remove stops the server's bridge. It returns at once; the process winds down in the
// background.
func (l *LocalRuntime) Remove(_ context.Context, key connector.Key) error {
	l.mu.Lock()
	p := l.procs[key]
	delete(l.procs, key)
	l.mu.Unlock()
	if p != nil {
		go p.stop()
	}
	return nil
}

// Watch adds nothing: no watch sees a local process, so a bridge that is not ready is
// polled (WorkloadStatus.RequeueAfter).
func (l *LocalRuntime) Watch(b *builder.Builder) *builder.Builder { return b }

// Start blocks until ctx ends, then stops every bridge and waits for them.
func (l *LocalRuntime) Start(ctx context.Context) error {
	<-ctx.Done()
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
	return nil
}

// start runs the bridge on a free loopback port. The caller holds l.mu.
func (l *LocalRuntime) start(obj *mcpv1alpha1.MCPServer, env []string, fingerprint string) (*localProcess, error) {
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	argv := append(bridgeCommand(obj.Spec.Stdio, l.Binary, listen), obj.Spec.Stdio.Args...)
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx // the process outlives the reconcile; stop() ends it
	cmd.Env = env
	// A process group of its own, and (on Linux) SIGTERM when the manager dies.
	cmd.SysProcAttr = localProcAttr()
	log := l.Logger.WithValues("server", obj.Namespace+"/"+obj.Name)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the bridge: %w", err)
	}
	p := &localProcess{
		fingerprint: fingerprint,
		cmd:         cmd,
		endpoint:    "http://" + listen + "/mcp",
		readyURL:    "http://" + listen + "/readyz",
		exited:      make(chan struct{}),
	}
	log.Info("Started local bridge", "pid", cmd.Process.Pid, "endpoint", p.endpoint)
	go func() {
		relayLines(stdout, log.WithName("bridge"))
		err := cmd.Wait()
		close(p.exited)
		log.Info("Local bridge exited", "pid", cmd.Process.Pid, "result", fmt.Sprint(err))
	}()
	return p, nil
}

// resolveEnv returns the bridge process's environment: the manager's own PATH and HOME
// (the server's interpreter lives there on a developer machine), its OTEL_* variables
// (so that the bridge sends its traces where the manager sends its own, as `switchboard
// dev --otlp-endpoint` asks) and the spec's env, with values from Secrets and ConfigMaps
// of the server's namespace, which wins over both.
func (l *LocalRuntime) resolveEnv(ctx context.Context, obj *mcpv1alpha1.MCPServer) ([]string, error) {
	env := []string{}
	for _, name := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	secrets := &secretResolver{reader: l.Reader, namespace: obj.Namespace}
	for _, e := range obj.Spec.Stdio.Env {
		value := e.Value
		switch src := e.ValueFrom; {
		case src == nil:
		case src.SecretKeyRef != nil:
			data, err := secrets.value(ctx, mcpv1alpha1.SecretKeyReference{Name: src.SecretKeyRef.Name, Key: src.SecretKeyRef.Key})
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			value = string(data)
		case src.ConfigMapKeyRef != nil:
			cm := &corev1.ConfigMap{}
			if err := l.Reader.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: src.ConfigMapKeyRef.Name}, cm); err != nil {
				return nil, fmt.Errorf("env %s: reading configmap %q: %w", e.Name, src.ConfigMapKeyRef.Name, err)
			}
			v, ok := cm.Data[src.ConfigMapKeyRef.Key]
			if !ok {
				return nil, fmt.Errorf("env %s: configmap %q has no key %q", e.Name, src.ConfigMapKeyRef.Name, src.ConfigMapKeyRef.Key)
			}
			value = v
		default:
			return nil, fmt.Errorf("env %s: the local runtime supports value, secretKeyRef and configMapKeyRef only", e.Name)
		}
		env = append(env, e.Name+"="+value)
	}
	return env, nil
}

// localIgnoredNote names what of the spec the local runtime cannot apply, for the
// WorkloadAvailable message, so that nobody takes a local process for a confined one.
func localIgnoredNote(stdio *mcpv1alpha1.StdioServerSpec) string {
	if sc := stdio.SecurityContext; sc != nil && (sc.RunAsNonRoot != nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil) {
		return ", and runs the server as the manager's own user: spec.stdio.securityContext is not applied"
	}
	return ""
}

// localFingerprint identifies what a running bridge was started with. It hashes the
// resolved environment, so a rotated Secret restarts the process, and it keeps no value.
// An unset sessionMode is the default, PerSession, and restarts nothing.
func localFingerprint(stdio *mcpv1alpha1.StdioServerSpec, env []string) string {
	mode := stdio.SessionMode
	if mode == "" {
		mode = mcpv1alpha1.StdioSessionModePerSession
	}
	data, _ := json.Marshal(struct {
		Command, Args, Env []string
		MaxSessions        int32
		SessionMode        mcpv1alpha1.StdioSessionMode
	}{stdio.Command, stdio.Args, env, stdio.MaxSessions, mode})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func (p *localProcess) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// ready polls /readyz for up to wait (at least once).
func (p *localProcess) ready(ctx context.Context, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		if p.hasExited() {
			return false
		}
		reqCtx, cancel := context.WithTimeout(ctx, time.Second)
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, p.readyURL, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					cancel()
					return true
				}
			}
		}
		cancel()
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// stop sends SIGTERM to the bridge's process group, which closes its servers' stdin,
// and kills the group if it is still there after the grace period.
func (p *localProcess) stop() {
	pgid := -p.cmd.Process.Pid
	if err := syscall.Kill(pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
	case <-time.After(localStopGrace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.exited
	}
}

// relayLines copies a process's output into the log line by line, bounded per line.
func relayLines(r io.Reader, log logr.Logger) {
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 4096), 64<<10)
	for scanner.Scan() {
		log.V(1).Info(scanner.Text())
	}
	_, _ = io.Copy(io.Discard, r) // a line over the bound ends scanning; keep draining
}

// freeLoopbackPort returns a port nothing listens on at 127.0.0.1.
func freeLoopbackPort() (int, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
