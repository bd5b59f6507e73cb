package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// spec.http.auth.oauth2.clientCredentials.issuer reaches the connector: a server whose
// metadata names another authorization server than the pinned one is MetadataMismatch,
// and its token endpoint never sees the client secret; pinned to the issuer the
// metadata names, it is Ready.
func TestOAuthPinnedIssuerFromTheSpec(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns)
	const clientSecret = "pinned-client-secret-1717"
	o := newOAuthServer(t, clientSecret)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vendor-oauth"}, Data: map[string][]byte{"secret": []byte(clientSecret)}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())

	withIssuer := func(name, issuer string) *mcpv1alpha1.MCPServer {
		obj := httpServer(ns, name, o.srv.URL+"/mcp")
		obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{ClientCredentials: &mcpv1alpha1.OAuth2ClientCredentials{
			ClientID:     "switchboard",
			ClientSecret: &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "vendor-oauth", Key: "secret"}},
			Issuer:       issuer,
		}}}
		g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
		return obj
	}

	other := withIssuer("pinned-elsewhere", "https://auth.example.com")
	testutil.Eventually(t, eventually, "MetadataMismatch naming the pinned issuer", func() error {
		got, err := readyIs(other, metav1.ConditionFalse, mcpv1alpha1.ReasonMetadataMismatch)
		if err != nil {
			return err
		}
		if a := authenticatedCondition(got); a == nil || a.Reason != mcpv1alpha1.ReasonMetadataMismatch || !strings.Contains(a.Message, "pinned issuer https://auth.example.com:443") {
			return fmt.Errorf("Authenticated is %+v", a)
		}
		return nil
	})
	g.Expect(o.lastSecret()).To(BeEmpty(), "the token endpoint was asked for a token")

	pinned := withIssuer("pinned", o.srv.URL)
	awaitReady(t, pinned, metav1.ConditionTrue, "")
	g.Expect(o.lastSecret()).To(Equal(clientSecret))
}
