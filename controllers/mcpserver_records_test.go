package controllers_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestSettledServersHoldNoRecordsAndWriteOnce applies a few servers at once and checks,
// once they are Ready, that the reconciler keeps no record of its own writes or of its
// announcements for them (copies of their status, which add up over a fleet), that it
// patched each one's Ready status and its finalizer once, and that each got one
// Connected Event: forgetting the records never costs a second write or Event. While
// they connect, a Secret they reference keeps changing, so reconciles keep coming in
// between the writes and the cache catching up with them; it runs again with the
// manager's cache of MCPServers lagging, so that those reconciles read copies older
// than the manager's own writes.
func TestSettledServersHoldNoRecordsAndWriteOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		lag  time.Duration
	}{
		{name: "cache in step"},
		{name: "cache lagging", lag: 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ns := newNamespace(t)
			cfg := rest.CopyConfig(env.Config)
			if tc.lag > 0 {
				cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return laggingWatches{next: next, lag: tc.lag} })
			}
			var reconciler *controllers.MCPServerReconciler
			writes := newWriteCounter()
			startOperatorWith(t, ns, cfg, func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
				reconciler = r
				r.Client = &hookedClient{Client: r.Client,
					afterStatus: func(s *mcpv1alpha1.MCPServer) error {
						if meta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) {
							writes.add(writes.ready, s.Name)
						}
						return nil
					},
					afterPatch: func(s *mcpv1alpha1.MCPServer) error {
						writes.add(writes.finalizers, s.Name)
						return nil
					},
				}
			})
			srv := newMCPServer(t, 14)
			ctx := context.Background()
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "header"},
				Data:       map[string][]byte{"value": []byte("unchanged")},
			}
			g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())

			const servers = 6
			names := make([]string, servers)
			for i := range names {
				names[i] = fmt.Sprintf("settled-%d", i)
				obj := httpServer(ns, names[i], srv.url())
				obj.Spec.HTTP.Headers = []mcpv1alpha1.HTTPHeader{{
					Name:      "X-Header",
					ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "header", Key: "value"}},
				}}
				g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
			}
			// Each change of the Secret's annotations reconciles every server that
			// references it; its data, and so the sessions, stay as they are.
			stop, poked := make(chan struct{}), make(chan struct{})
			stopPoking := sync.OnceFunc(func() { close(stop); <-poked })
			t.Cleanup(stopPoking)
			go func() {
				defer close(poked)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(40 * time.Millisecond):
					}
					patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"metadata":{"annotations":{"poke":"%d"}}}`, i))
					if err := k8sClient.Patch(ctx, secret.DeepCopy(), patch); err != nil {
						t.Errorf("changing the Secret: %v", err)
						return
					}
				}
			}()
			for _, name := range names {
				testutil.Eventually(t, eventually, name+" Ready with the session finalizer", func() error {
					got, err := readyIs(httpServer(ns, name, srv.url()), metav1.ConditionTrue, "")
					if err != nil {
						return err
					}
					if !slices.Contains(got.Finalizers, "mcp.switchboard.dev/session") {
						return fmt.Errorf("finalizers %q", got.Finalizers)
					}
					return nil
				})
			}
			stopPoking()
			for _, name := range names {
				key := connector.Key{Namespace: ns, Name: name}
				testutil.Eventually(t, eventually, name+" Ready, no record held of its writes or announcements", func() error {
					return holdsNoRecords(reconciler, key)
				})
			}

			// Give a duplicate Event, or a write from a lagging cache, time to show.
			time.Sleep(3*probeInterval + 2*tc.lag)
			for _, name := range names {
				g.Expect(writes.of(writes.ready, name)).To(Equal(1), "%s: status patches that say Ready", name)
				g.Expect(writes.of(writes.finalizers, name)).To(Equal(1), "%s: finalizer patches", name)
				testutil.Eventually(t, eventually, name+": one Event Connected on a healthy first connect", func() error {
					return onlyConnectedOnce(t, ns, name)
				})
			}
		})
	}
}

// laggingWatches delays every read of an MCPServer watch by lag, so that the manager's
// cache falls behind its own writes as a busy one does.
type laggingWatches struct {
	next http.RoundTripper
	lag  time.Duration
}

func (l laggingWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/mcpservers") {
		resp.Body = &laggingBody{ReadCloser: resp.Body, lag: l.lag}
	}
	return resp, err
}

type laggingBody struct {
	io.ReadCloser
	lag time.Duration
}

func (b *laggingBody) Read(p []byte) (int, error) {
	time.Sleep(b.lag)
	return b.ReadCloser.Read(p)
}

// writeCounter counts, per server, the reconciler's status patches that say Ready and
// its patches of the object itself (the finalizer's).
type writeCounter struct {
	mu         sync.Mutex
	ready      map[string]int
	finalizers map[string]int
}

func newWriteCounter() *writeCounter {
	return &writeCounter{ready: map[string]int{}, finalizers: map[string]int{}}
}

func (w *writeCounter) add(counts map[string]int, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts[name]++
}

func (w *writeCounter) of(counts map[string]int, name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return counts[name]
}

// hookedClient is the reconciler's client with hooks around its MCPServer patches:
// beforeStatus may fail a status patch before it is sent; afterStatus and afterPatch
// see the status patches and the patches of the object itself that succeeded.
type hookedClient struct {
	client.Client
	beforeStatus, afterStatus, afterPatch func(*mcpv1alpha1.MCPServer) error
}

func (c *hookedClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	err := c.Client.Patch(ctx, obj, patch, opts...)
	if s, ok := obj.(*mcpv1alpha1.MCPServer); ok && err == nil && c.afterPatch != nil {
		return c.afterPatch(s)
	}
	return err
}

func (c *hookedClient) Status() client.SubResourceWriter {
	return &hookedStatusWriter{SubResourceWriter: c.Client.Status(), client: c}
}

type hookedStatusWriter struct {
	client.SubResourceWriter
	client *hookedClient
}

func (w *hookedStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s, ok := obj.(*mcpv1alpha1.MCPServer)
	if ok && w.client.beforeStatus != nil {
		if err := w.client.beforeStatus(s); err != nil {
			return err
		}
	}
	err := w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
	if ok && err == nil && w.client.afterStatus != nil {
		return w.client.afterStatus(s)
	}
	return err
}

// eventCounts counts the Events about the named server by reason, repeats of one Event
// (its series) included.
// onlyConnectedOnce says which Events the named server has when they are not exactly
// one Connected.
func onlyConnectedOnce(t *testing.T, namespace, name string) error {
	if counts := eventCounts(t, namespace, name); !maps.Equal(counts, map[string]int{"Connected": 1}) {
		return fmt.Errorf("Events by reason: %v", counts)
	}
	return nil
}

// holdsNoRecords says whether the reconciler holds a record of its writes (written) of
// key: the one fact of a server it keeps, and only until its cache shows the write.
func holdsNoRecords(r *controllers.MCPServerReconciler, key connector.Key) error {
	if r.HoldsRecordsOf(key) {
		return fmt.Errorf("written %v", true)
	}
	return nil
}

func eventCounts(t *testing.T, namespace, name string) map[string]int {
	counts := map[string]int{}
	for _, e := range events(t, namespace, name) {
		n := 1
		if e.Series != nil {
			n = max(n, int(e.Series.Count))
		}
		counts[e.Reason] += n
	}
	return counts
}

// TestAFailedStatusPatchDoesNotAnnounceTwice: Events go out after the status they
// announce. When the patch of a Ready status fails, the reconcile is retried; its retry
// must write the status but not announce the connect a second time, and once it is
// written no record is kept.
func TestAFailedStatusPatchDoesNotAnnounceTwice(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	var reconciler *controllers.MCPServerReconciler
	failures := &failFirstReadyPatch{}
	startOperator(t, ns, func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
		reconciler = r
		r.Client = &hookedClient{Client: r.Client, beforeStatus: failures.fail}
	})
	srv := newMCPServer(t, 3)
	ctx := context.Background()
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "retried", srv.url()))).To(Succeed())

	awaitReady(t, httpServer(ns, "retried", srv.url()), metav1.ConditionTrue, "")
	g.Expect(failures.failed()).To(BeTrue(), "the first patch of a Ready status was to fail")

	time.Sleep(3 * probeInterval) // time for a second announcement to show
	testutil.Eventually(t, eventually, "one Event Connected after a failed, then retried, status patch", func() error {
		return onlyConnectedOnce(t, ns, "retried")
	})
	testutil.Eventually(t, eventually, "no record held once the retried status is written", func() error {
		return holdsNoRecords(reconciler, connector.Key{Namespace: ns, Name: "retried"})
	})
}

// failFirstReadyPatch fails the first status patch that says Ready, once.
type failFirstReadyPatch struct {
	mu   sync.Mutex
	done bool
}

func (f *failFirstReadyPatch) fail(s *mcpv1alpha1.MCPServer) error {
	if !meta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return nil
	}
	f.done = true
	return fmt.Errorf("the API server is unavailable (injected by the test)")
}

func (f *failFirstReadyPatch) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}
