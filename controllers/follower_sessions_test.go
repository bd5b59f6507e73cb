package controllers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A replica that does not lead holds each server's config as the leader builds it
// (Secret headers included), so that its gateway can serve, without probing the server
// itself, and writes nothing.
func TestAFollowerHoldsTheLeadersConfigAndWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	srv := newMCPServer(t, 2)
	const token = "Bearer follower-secret-7311"
	g.Expect(k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api-token"},
		Data:       map[string][]byte{"token": []byte(token)},
	})).To(Succeed())
	obj := httpServer(ns, "notes", srv.url())
	obj.Spec.HTTP.Headers = []mcpv1alpha1.HTTPHeader{{
		Name:      "Authorization",
		ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "api-token", Key: "token"}},
	}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	pool, err := connector.NewPool(connector.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(pool.Close)
	elected := make(chan struct{})
	r := &controllers.FollowerSessionReconciler{
		Servers: &controllers.MCPServerReconciler{Client: k8sClient, SecretReader: k8sClient, Pool: pool,
			EgressDefaults: egress.Defaults{Posture: egress.PostureAll}},
		Elected: elected,
	}
	key := connector.Key{Namespace: ns, Name: "notes"}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	testutil.Consistently(t, 300*time.Millisecond, "a follower's standby server not connected until its gateway needs it", func() error {
		if srv.lastAuthorization() != "" {
			return errors.New("the server received a request with credentials")
		}
		return nil
	})

	// The gateway's upstream connects with the leader's config.
	up, err := pool.OpenUpstream(ctx, key, nil)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = up.Close() })
	g.Expect(srv.lastAuthorization()).To(Equal(token))
	got := &mcpv1alpha1.MCPServer{}
	g.Expect(k8sClient.Get(ctx, req.NamespacedName, got)).To(Succeed())
	g.Expect(got.ResourceVersion).To(Equal(obj.ResourceVersion), "a follower must not write the object")

	// Deleted: the follower lets its session go.
	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	_, err = r.Reconcile(ctx, req)
	g.Expect(err).NotTo(HaveOccurred())
	_, held := pool.Snapshot(key)
	g.Expect(held).To(BeFalse())

	// Once elected it stands aside: the MCPServerReconciler owns the pool then.
	close(elected)
	g.Expect(k8sClient.Create(ctx, httpServer(ns, "later", srv.url()))).To(Succeed())
	_, err = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: "later"}})
	g.Expect(err).NotTo(HaveOccurred())
	_, held = pool.Snapshot(connector.Key{Namespace: ns, Name: "later"})
	g.Expect(held).To(BeFalse())
}
