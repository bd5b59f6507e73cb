package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/sharding"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const (
	shardTestNamespace = "switchboard-system"
	fleetNamespace     = "fleet"
	fleetSize          = 30
	// shardLease is the replicas' --shard-lease-duration: long enough that a handover
	// on SIGTERM, which must not wait for it, is told apart from one after expiry.
	shardLease = 10 * time.Second
)

// replica is one manager process of the sharded group.
type replica struct {
	identity    string
	metricsAddr string
	catalogAddr string
	cmd         *exec.Cmd
	logs        *logLines
	exited      chan error
}

// startReplica runs the manager binary as one sharded replica.
func startReplica(t *testing.T, bin, kubeconfig, identity string) *replica {
	t.Helper()
	r := &replica{identity: identity, metricsAddr: freeAddr(t), catalogAddr: freeAddr(t),
		logs: &logLines{done: make(chan struct{})}, exited: make(chan error, 1)}
	r.cmd = exec.CommandContext(context.Background(), bin, "manager",
		"--kubeconfig", kubeconfig,
		"--sharding", "leases",
		"--shard-identity", identity,
		"--shard-namespace", shardTestNamespace,
		"--shard-lease-duration", shardLease.String(),
		"--leader-elect", "--leader-election-namespace", shardTestNamespace,
		"--metrics-secure=false", "--metrics-bind-address", r.metricsAddr,
		"--health-probe-bind-address", freeAddr(t),
		"--catalog-bind-address", r.catalogAddr, "--catalog-auth", "none",
		"--default-egress", "all",
	)
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go r.logs.read(stderr)
	go func() { <-r.logs.done; r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s logs:\n%s", identity, strings.Join(r.logs.snapshot(), "\n"))
		}
	})
	return r
}

// shardMetrics is what a replica's metrics say of its share.
type shardMetrics struct {
	// readySessions are the servers it holds a Ready session with
	// (switchboard_connector_sessions).
	readySessions map[string]bool
	// members and owned are switchboard_shard_members and switchboard_shard_owned_servers.
	members, owned float64
}

func (r *replica) scrape() (*shardMetrics, error) {
	resp, err := http.Get("http://" + r.metricsAddr + "/metrics") //nolint:noctx // test poll
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	got := &shardMetrics{readySessions: map[string]bool{}}
	if f := families["switchboard_shard_members"]; f != nil && len(f.GetMetric()) == 1 {
		got.members = f.GetMetric()[0].GetGauge().GetValue()
	}
	if f := families["switchboard_shard_owned_servers"]; f != nil && len(f.GetMetric()) == 1 {
		got.owned = f.GetMetric()[0].GetGauge().GetValue()
	}
	held := got.readySessions
	if f := families["switchboard_connector_sessions"]; f != nil {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["state"] == "Ready" && m.GetGauge().GetValue() == 1 {
				held[labels["name"]] = true
			}
		}
	}
	return got, nil
}

// stop sends sig and waits for the process to end.
func (r *replica) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := r.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if sig == syscall.SIGTERM && err != nil {
			t.Errorf("%s exited with %v after SIGTERM, want a clean exit", r.identity, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of %s", r.identity, sig)
	}
}

// ownedBy returns, per member, the fleet's servers the ring gives it.
func ownedBy(ring sharding.Ring) map[string][]string {
	owned := map[string][]string{}
	for i := range fleetSize {
		name := fleetServerName(i)
		owner := ring.Owner(fleetNamespace + "/" + name)
		owned[owner] = append(owned[owner], name)
	}
	return owned
}

func fleetServerName(i int) string { return fmt.Sprintf("server-%02d", i) }

// serverWatch records every change of the fleet's MCPServers and of their Ready
// condition from the moment it starts.
type serverWatch struct {
	mu       sync.Mutex
	modified []string
	notReady []string
}

func (w *serverWatch) run(ch <-chan watch.Event) {
	for e := range ch {
		obj, ok := e.Object.(*mcpv1alpha1.MCPServer)
		if !ok {
			continue
		}
		w.mu.Lock()
		w.modified = append(w.modified, fmt.Sprintf("%s %s rv=%s", e.Type, obj.Name, obj.ResourceVersion))
		if !meta.IsStatusConditionTrue(obj.Status.Conditions, mcpv1alpha1.ConditionReady) {
			w.notReady = append(w.notReady, obj.Name)
		}
		w.mu.Unlock()
	}
}

func (w *serverWatch) check(t *testing.T, when string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.notReady) > 0 {
		t.Errorf("%s: servers seen not Ready: %v", when, w.notReady)
	}
	if len(w.modified) > 0 {
		t.Errorf("%s: healthy servers were written: %v", when, w.modified)
	}
}

// Three manager replicas share a fleet of servers through their Leases: every server is
// owned by exactly one (its status written by that replica alone), a SIGKILLed replica's
// servers are held by the others within the lease duration plus 5s, a replica that joins
// takes back about a third, and one that gets SIGTERM hands over without waiting for its
// Lease to expire. Through all of it no server is written again or seen not Ready, and
// no Event is recorded twice. Every replica's gateway serves every server.
func TestReplicasShareServersThroughLeasesAndHandOverWithoutAGap(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	bin := buildSwitchboard(t)
	ctx := t.Context()

	upstream := mcp.NewServer(&mcp.Implementation{Name: "fleet-upstream", Version: "1.0.0"}, nil)
	for i := range 3 {
		mcp.AddTool(upstream, &mcp.Tool{Name: fmt.Sprintf("tool_%d", i), Description: "A tool"},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{}, nil, nil
			})
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstreamServer := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return upstream }, nil), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = upstreamServer.Serve(l) }()
	t.Cleanup(func() { _ = upstreamServer.Close() })

	for _, ns := range []string{shardTestNamespace, fleetNamespace} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	identities := []string{"replica-a", "replica-b", "replica-c"}
	replicas := map[string]*replica{}
	for _, id := range identities {
		replicas[id] = startReplica(t, bin, kubeconfig, id)
	}
	all := sharding.NewRing(identities...)
	// Each counts all three before the fleet is applied.
	counted := fmt.Sprintf(`"members":["%s"]`, strings.Join(all.Members(), `","`))
	for _, r := range replicas {
		testutil.Eventually(t, 60*time.Second, r.identity+" counts all three members", func() error {
			if !slices.ContainsFunc(r.logs.snapshot(), func(line string) bool { return strings.Contains(line, counted) }) {
				return fmt.Errorf("no log line with %s", counted)
			}
			return nil
		})
	}

	for i := range fleetSize {
		s := &mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: fleetNamespace, Name: fleetServerName(i)},
			Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
				URL: "http://" + l.Addr().String() + "/mcp", Protocol: mcpv1alpha1.HTTPProtocolStreamableHTTP, AllowInsecureHTTP: true,
			}},
		}
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 60*time.Second, "every server Ready with its tools and finalizer", func() error {
		var list mcpv1alpha1.MCPServerList
		if err := admin.List(ctx, &list, client.InNamespace(fleetNamespace)); err != nil {
			return err
		}
		for _, s := range list.Items {
			if !meta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) || s.Status.ToolCount != 3 || len(s.Finalizers) == 0 {
				return fmt.Errorf("%s not Ready with 3 tools yet", s.Name)
			}
		}
		return nil
	})

	// Every server's status was written by its owner alone.
	var list mcpv1alpha1.MCPServerList
	if err := admin.List(ctx, &list, client.InNamespace(fleetNamespace)); err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		var writers []string
		for _, f := range s.ManagedFields {
			if f.Subresource == "status" {
				writers = append(writers, f.Manager)
			}
		}
		if want := "switchboard-" + all.Owner(fleetNamespace+"/"+s.Name); !slices.Equal(writers, []string{want}) {
			t.Errorf("%s: status written by %v, want %s alone", s.Name, writers, want)
		}
	}
	// Every replica holds sessions with exactly the servers it owns: no standby server
	// costs a session.
	expectSessions := func(why string, within time.Duration, ring sharding.Ring) time.Duration {
		t.Helper()
		start := time.Now()
		owned := ownedBy(ring)
		for _, id := range ring.Members() {
			r := replicas[id]
			testutil.Eventually(t, within-time.Since(start), fmt.Sprintf("%s: %s holds the sessions of its %d servers", why, id, len(owned[id])), func() error {
				m, err := r.scrape()
				if err != nil {
					return err
				}
				var got []string
				for name := range m.readySessions {
					got = append(got, name)
				}
				slices.Sort(got)
				if !slices.Equal(got, owned[id]) {
					return fmt.Errorf("holds %v, owns %v", got, owned[id])
				}
				if int(m.members) != ring.Len() || int(m.owned) != len(owned[id]) {
					return fmt.Errorf("metrics say %v members and %v servers owned, want %d and %d", m.members, m.owned, ring.Len(), len(owned[id]))
				}
				return nil
			})
		}
		return time.Since(start)
	}
	expectSessions("three replicas", 30*time.Second, all)

	// From here on nothing may be written.
	time.Sleep(time.Second)
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.Watch(ctx, &mcpv1alpha1.MCPServerList{}, client.InNamespace(fleetNamespace), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var changes serverWatch
	go changes.run(w.ResultChan())
	countEvents := func() int {
		var events eventsv1.EventList
		if err := admin.List(ctx, &events, client.InNamespace(fleetNamespace)); err != nil {
			t.Fatal(err)
		}
		return len(events.Items)
	}
	eventsBefore := countEvents()

	// SIGKILL: the survivors hold the killed replica's servers once its Lease expires.
	survivors := sharding.NewRing("replica-b", "replica-c")
	replicas["replica-a"].stop(t, syscall.SIGKILL)
	took := expectSessions("after SIGKILL of replica-a", shardLease+5*time.Second, survivors)
	t.Logf("SIGKILL: the survivors held replica-a's %d servers %s after the kill (lease %s)", len(ownedBy(all)["replica-a"]), took.Round(time.Millisecond), shardLease)
	changes.check(t, "after SIGKILL")

	// A replica joining (replica-a again, with a new process) takes back its share.
	replicas["replica-a"] = startReplica(t, bin, kubeconfig, "replica-a")
	took = expectSessions("after replica-a joined again", 60*time.Second, all)
	moved := len(ownedBy(all)["replica-a"])
	t.Logf("join: %d of %d servers moved to replica-a in %s", moved, fleetSize, took.Round(time.Millisecond))
	if moved < fleetSize/6 || moved > fleetSize/2 {
		t.Errorf("%d of %d servers moved to the joining replica, want about a third", moved, fleetSize)
	}
	changes.check(t, "after the join")

	// SIGTERM: the replica deletes its Lease, and the others take over before it would
	// have expired.
	start := time.Now()
	replicas["replica-b"].stop(t, syscall.SIGTERM)
	if err := admin.Get(ctx, client.ObjectKey{Namespace: shardTestNamespace, Name: "switchboard-shard-replica-b"}, &coordinationv1.Lease{}); !apierrors.IsNotFound(err) {
		t.Errorf("replica-b's Lease after SIGTERM: %v, want it deleted", err)
	}
	took = expectSessions("after SIGTERM of replica-b", shardLease-time.Since(start), sharding.NewRing("replica-a", "replica-c"))
	t.Logf("SIGTERM: the others held replica-b's servers %s after the signal", took.Round(time.Millisecond))
	changes.check(t, "after SIGTERM")

	if n := countEvents(); n != eventsBefore {
		t.Errorf("%d Events were recorded during the handovers, want none", n-eventsBefore)
	}

	// Every replica's gateway serves every server, owned or not.
	gatewayRing := sharding.NewRing("replica-a", "replica-c")
	for _, id := range gatewayRing.Members() {
		for _, name := range []string{ownedBy(gatewayRing)["replica-a"][0], ownedBy(gatewayRing)["replica-c"][0]} {
			url := fmt.Sprintf("http://%s/mcp/namespaces/%s/servers/%s", replicas[id].catalogAddr, fleetNamespace, name)
			agent := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			session, err := agent.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
			if err != nil {
				t.Fatalf("%s's gateway, server %s (owner %s): %v", id, name, gatewayRing.Owner(fleetNamespace+"/"+name), err)
			}
			res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "tool_0"})
			_ = session.Close()
			if err != nil || res.IsError {
				t.Errorf("tools/call through %s's gateway to %s (owner %s): %v %+v", id, name, gatewayRing.Owner(fleetNamespace+"/"+name), err, res)
			}
		}
	}
}
