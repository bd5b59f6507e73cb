// Command oauthclient is the client under test for the MCP conformance suite's OAuth
// client credentials scenarios, with Switchboard as the client: the suite runs it with
// the scenario's server URL as its last argument and the scenario's credentials in
// MCP_CONFORMANCE_CONTEXT. It applies a Secret and an MCPServer with
// spec.http.auth.oauth2.clientCredentials to the control plane that
// SWITCHBOARD_KUBECONFIG points at (a running Switchboard manager does the rest) and
// waits for the server to become Ready. It exits 0 once Ready is True, 2 when
// Authenticated is False (the manager refused to authenticate), 1 otherwise.
//
// Environment: SWITCHBOARD_KUBECONFIG (a kubeconfig file), SWITCHBOARD_NAMESPACE and
// SWITCHBOARD_SERVER_NAME (where to put the MCPServer and its Secret).
//
// It is a test program only; nothing imports it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// scenarioContext is what the suite puts in MCP_CONFORMANCE_CONTEXT.
type scenarioContext struct {
	Name             string `json:"name"`
	ClientID         string `json:"client_id"`
	ClientSecret     string `json:"client_secret"`
	PrivateKeyPEM    string `json:"private_key_pem"`
	SigningAlgorithm string `json:"signing_algorithm"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oauthclient:", err)
		var refused *authError
		if errors.As(err, &refused) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Println("oauthclient: Ready")
}

// authError is a refusal to authenticate.
type authError struct{ reason, message string }

func (e *authError) Error() string { return "Authenticated=False " + e.reason + ": " + e.message }

func run() error {
	if len(os.Args) < 2 {
		return fmt.Errorf("usage: oauthclient SERVER_URL")
	}
	serverURL := os.Args[len(os.Args)-1]
	namespace, name := os.Getenv("SWITCHBOARD_NAMESPACE"), os.Getenv("SWITCHBOARD_SERVER_NAME")
	if namespace == "" || name == "" {
		return fmt.Errorf("SWITCHBOARD_NAMESPACE and SWITCHBOARD_SERVER_NAME must be set")
	}
	var sc scenarioContext
	if raw := os.Getenv("MCP_CONFORMANCE_CONTEXT"); raw != "" {
		if err := json.Unmarshal([]byte(raw), &sc); err != nil {
			return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
		}
	}
	if sc.ClientID == "" {
		// A scenario that hands out no credentials (auth/resource-mismatch): the
		// manager must refuse before it would use any.
		sc.ClientID, sc.ClientSecret = "switchboard-conformance", "unused-conformance-secret"
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SWITCHBOARD_KUBECONFIG"))
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	_ = mcpv1alpha1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-oauth"}, Data: map[string][]byte{}}
	cc := &mcpv1alpha1.OAuth2ClientCredentials{ClientID: sc.ClientID}
	ref := mcpv1alpha1.SecretKeyReference{Name: secret.Name}
	if sc.PrivateKeyPEM != "" {
		ref.Key = "key.pem"
		secret.Data[ref.Key] = []byte(sc.PrivateKeyPEM)
		cc.PrivateKey = &mcpv1alpha1.SecretKeySource{SecretKeyRef: ref}
	} else {
		ref.Key = "secret"
		secret.Data[ref.Key] = []byte(sc.ClientSecret)
		cc.ClientSecret = &mcpv1alpha1.SecretKeySource{SecretKeyRef: ref}
	}
	if err := c.Create(ctx, secret); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Secret: %w", err)
	}
	obj := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
			URL:               serverURL,
			Protocol:          mcpv1alpha1.HTTPProtocolStreamableHTTP,
			AllowInsecureHTTP: true, // the suite serves plain http on localhost
			Auth:              &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{ClientCredentials: cc}},
		}},
	}
	if err := c.Create(ctx, obj); err != nil {
		return fmt.Errorf("creating the MCPServer: %w", err)
	}

	for {
		got := &mcpv1alpha1.MCPServer{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), got); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		if ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == got.Generation {
			return nil
		}
		if a := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionAuthenticated); a != nil && a.Status == metav1.ConditionFalse {
			return &authError{a.Reason, a.Message}
		}
		select {
		case <-ctx.Done():
			if ready != nil {
				return fmt.Errorf("not Ready in time: %s: %s", ready.Reason, ready.Message)
			}
			return fmt.Errorf("not Ready in time")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
