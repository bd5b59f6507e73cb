package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// BenchmarkApplyToReady measures what a user waits for: from creating an MCPServer to
// seeing it Ready with its tools in status. It compares that with floors measured in the
// same run, each what any implementation has to do:
//   - the floor: a bare go-sdk client doing initialize + tools/list against the same
//     server, then one status patch carrying the very status the operator wrote for a
//     Ready server (its tools and conditions: what the user waits to see); it compares
//     with the time from the create's answer (where kubectl apply returns and kubectl
//     wait starts) to Ready;
//   - the floor with the apply: the create, then the same; it compares with the time
//     from before the create to Ready;
//   - the small-patch floor, which patches only status.toolCount: the floor of earlier
//     versions of this benchmark, for comparison with their figures.
//
// Run it with a fixed count for a stable median:
//
//	go test -run '^$' -bench ApplyToReady -benchtime 20x ./controllers/
func BenchmarkApplyToReady(b *testing.B) {
	ctx := context.Background()
	ns := newNamespace(b)
	startOperator(b, ns)
	srv := newMCPServer(b, 14)
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8sClient.Scheme()})
	if err != nil {
		b.Fatal(err)
	}

	// The floor: what any implementation has to do.
	patchTarget := httpServer(ns, "floor", srv.url())
	patchTarget.Spec.Suspend = true
	if err := k8sClient.Create(ctx, patchTarget); err != nil {
		b.Fatal(err)
	}
	floor := make([]time.Duration, 0, b.N)
	for i := range b.N {
		start := time.Now()
		handshake(ctx, b, srv.url())
		before := patchTarget.DeepCopy()
		patchTarget.Status.ToolCount = int32(i + 1) //nolint:gosec // a small loop counter
		if err := k8sClient.Status().Patch(ctx, patchTarget, client.MergeFrom(before)); err != nil {
			b.Fatal(err)
		}
		floor = append(floor, time.Since(start))
	}

	b.ResetTimer()
	applied := make([]time.Duration, 0, b.N)
	afterApply := make([]time.Duration, 0, b.N) // from the create's answer, as kubectl wait sees it
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		w, err := watcher.Watch(ctx, &mcpv1alpha1.MCPServerList{}, client.InNamespace(ns))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := k8sClient.Create(ctx, httpServer(ns, name, srv.url())); err != nil {
			b.Fatal(err)
		}
		created := time.Now()
		waitReady(b, w, name)
		applied = append(applied, time.Since(start))
		afterApply = append(afterApply, time.Since(created))
		w.Stop()
	}
	b.StopTimer()

	// The floor with the apply: what any implementation has to do once the user's
	// create is part of the measurement, as it is above. Create the object, initialize
	// + tools/list, and write the very status the operator wrote for a Ready server.
	ready := &mcpv1alpha1.MCPServer{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bench-0"}, ready); err != nil {
		b.Fatal(err)
	}
	floorWithApply := make([]time.Duration, 0, b.N)
	fullFloor := make([]time.Duration, 0, b.N) // the same, from the create's answer
	for i := range b.N {
		start := time.Now()
		target := httpServer(ns, fmt.Sprintf("floor-apply-%d", i), srv.url())
		target.Spec.Suspend = true
		if err := k8sClient.Create(ctx, target); err != nil {
			b.Fatal(err)
		}
		created := time.Now()
		handshake(ctx, b, srv.url())
		before := target.DeepCopy()
		target.Status = *ready.Status.DeepCopy()
		if err := k8sClient.Status().Patch(ctx, target, client.MergeFrom(before)); err != nil {
			b.Fatal(err)
		}
		floorWithApply = append(floorWithApply, time.Since(start))
		fullFloor = append(fullFloor, time.Since(created))
	}

	smallFloor, floorMedian, withApply := median(floor), median(fullFloor), median(floorWithApply)
	appliedMedian, afterApplyMedian := median(applied), median(afterApply)
	ratio := float64(afterApplyMedian) / float64(floorMedian)
	ratioWithApply := float64(appliedMedian) / float64(withApply)
	b.ReportMetric(float64(afterApplyMedian.Microseconds())/1000, "applied-to-ready-ms")
	b.ReportMetric(float64(floorMedian.Microseconds())/1000, "floor-ms")
	b.ReportMetric(ratio, "ratio")
	b.ReportMetric(float64(appliedMedian.Microseconds())/1000, "apply-to-ready-ms")
	b.ReportMetric(float64(withApply.Microseconds())/1000, "floor-with-apply-ms")
	b.ReportMetric(ratioWithApply, "ratio-with-apply")
	b.ReportMetric(float64(smallFloor.Microseconds())/1000, "small-patch-floor-ms")
	b.Logf("medians over %d runs: create answered -> Ready %v, floor (initialize + tools/list + the same status patch) %v, ratio %.2f; "+
		"before the create -> Ready %v, floor with the create %v, ratio %.2f; "+
		"small-patch floor %v (before the create -> Ready is %.2fx that)",
		b.N, afterApplyMedian, floorMedian, ratio, appliedMedian, withApply, ratioWithApply,
		smallFloor, float64(appliedMedian)/float64(smallFloor))
}

// handshake is what any client has to do to learn a server's tools: initialize and
// tools/list with a bare go-sdk client.
func handshake(ctx context.Context, b *testing.B, endpoint string) {
	b.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "floor", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		b.Fatal(err)
	}
	_ = cs.Close()
}

// waitReady reads the watch until the named server is Ready with its tools listed.
func waitReady(b *testing.B, w watch.Interface, name string) {
	b.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				b.Fatal("watch closed")
			}
			obj, isServer := e.Object.(*mcpv1alpha1.MCPServer)
			if isServer && obj.Name == name && obj.Status.ToolCount > 0 &&
				meta.IsStatusConditionTrue(obj.Status.Conditions, mcpv1alpha1.ConditionReady) {
				return
			}
		case <-timeout:
			b.Fatalf("%s not Ready within 30s", name)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
