package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// A server whose credentials follow the caller, with no operator credential beside: the
// operator never calls the server as anyone (no token request, no MCP request with a
// token), checks its metadata instead, and says the tools are discovered per caller,
// publishing none. Without the metadata it is not Ready, with a reason.
func TestPerCallerServerWithoutOperatorCredentialPublishesNoTools(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	const stsSecret = "sts-client-secret-5150"
	o := newOAuthServer(t, stsSecret)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sts"}, Data: map[string][]byte{"secret": []byte(stsSecret)}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	obj := httpServer(ns, "per-caller", o.srv.URL+"/mcp")
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{TokenExchange: &mcpv1alpha1.OAuth2TokenExchange{
		TokenURL:     o.srv.URL + "/token",
		ClientID:     "switchboard",
		ClientSecret: &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "sts", Key: "secret"}},
	}}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionToolsDiscovered)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal(mcpv1alpha1.ReasonDiscoveredPerCaller))
		g.Expect(c.Message).To(ContainSubstring("tokenExchange"))
		g.Expect(got.Status.ToolCount).To(BeZero())
		g.Expect(got.Status.Tools).To(BeEmpty())
	}, eventually, poll).Should(Succeed())
	g.Expect(o.tokens()).To(BeEmpty(), "the operator requested a token as if it were a caller")
	g.Expect(o.lastSecret()).To(BeEmpty(), "the operator sent the token service's client secret")

	// A server that publishes no protected resource metadata: the operator cannot check
	// it, and says so.
	bare := httpServer(ns, "per-caller-bare", o.srv.URL+"/elsewhere/mcp")
	bare.Spec.HTTP.Auth = obj.Spec.HTTP.Auth.DeepCopy()
	g.Expect(k8sClient.Create(ctx, bare)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := get(g, bare)
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).NotTo(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(ContainSubstring("protected resource metadata"))
		g.Expect(c.Message).NotTo(ContainSubstring(stsSecret))
	}, eventually, poll).Should(Succeed())
}
