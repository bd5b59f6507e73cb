// Command oauthclient is the client under test for the MCP conformance suite's OAuth
// client credentials and workload identity scenarios, with Switchboard as the client:
// the suite runs it with the scenario's server URL as its last argument and the
// scenario's credentials in MCP_CONFORMANCE_CONTEXT. It applies a Secret and an
// MCPServer to the control plane that SWITCHBOARD_KUBECONFIG points at (a running
// Switchboard manager does the rest) and waits for the server to become Ready: with
// spec.http.auth.oauth2.clientCredentials, or, when the context holds workload JWTs
// (auth/wif-jwt-bearer), with spec.http.auth.oauth2.workloadIdentity.tokenFrom the
// Secret holding one of them. It exits 0 once Ready is True, 2 when Authenticated is
// False (the manager refused to authenticate, or the authorization server refused it),
// 1 otherwise.
//
// Environment: SWITCHBOARD_KUBECONFIG (a kubeconfig file), SWITCHBOARD_NAMESPACE and
// SWITCHBOARD_SERVER_NAME (where to put the MCPServer and its Secret). For workload
// identity, SWITCHBOARD_WIF_JWT names the context's JWT to present (valid_jwt, the
// default, wrong_audience_jwt or expired_jwt), SWITCHBOARD_WIF_SCOPES the scopes to
// request (space-separated), and SWITCHBOARD_AFTER_REFUSAL how long to go on running
// after a refusal (a Go duration), so that a retry, were there one, would reach the
// scenario's authorization server while it still listens.
//
// It is a test program only; nothing imports it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
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
	// Workload JWTs of auth/wif-jwt-bearer.
	ValidJWT         string `json:"valid_jwt"`
	WrongAudienceJWT string `json:"wrong_audience_jwt"`
	ExpiredJWT       string `json:"expired_jwt"`
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
	if sc.ClientID == "" && sc.ValidJWT == "" {
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
	oauth := &mcpv1alpha1.OAuth2Auth{}
	ref := mcpv1alpha1.SecretKeyReference{Name: secret.Name}
	switch {
	case sc.ValidJWT != "":
		jwt, err := sc.workloadJWT(os.Getenv("SWITCHBOARD_WIF_JWT"))
		if err != nil {
			return err
		}
		ref.Key = "jwt"
		secret.Data[ref.Key] = []byte(jwt)
		oauth.WorkloadIdentity = &mcpv1alpha1.OAuth2WorkloadIdentity{
			TokenFrom: &mcpv1alpha1.SecretKeySource{SecretKeyRef: ref},
			ClientID:  sc.ClientID,
			Scopes:    strings.Fields(os.Getenv("SWITCHBOARD_WIF_SCOPES")),
		}
	case sc.PrivateKeyPEM != "":
		ref.Key = "key.pem"
		secret.Data[ref.Key] = []byte(sc.PrivateKeyPEM)
		oauth.ClientCredentials = &mcpv1alpha1.OAuth2ClientCredentials{ClientID: sc.ClientID, PrivateKey: &mcpv1alpha1.SecretKeySource{SecretKeyRef: ref}}
	default:
		ref.Key = "secret"
		secret.Data[ref.Key] = []byte(sc.ClientSecret)
		oauth.ClientCredentials = &mcpv1alpha1.OAuth2ClientCredentials{ClientID: sc.ClientID, ClientSecret: &mcpv1alpha1.SecretKeySource{SecretKeyRef: ref}}
	}
	var afterRefusal time.Duration
	if v := os.Getenv("SWITCHBOARD_AFTER_REFUSAL"); v != "" {
		if afterRefusal, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("SWITCHBOARD_AFTER_REFUSAL: %w", err)
		}
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
			Auth:              &mcpv1alpha1.HTTPAuth{OAuth2: oauth},
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
			time.Sleep(afterRefusal)
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

// workloadJWT returns the context's JWT that which names ("" is valid_jwt).
func (sc scenarioContext) workloadJWT(which string) (string, error) {
	jwt := map[string]string{"": sc.ValidJWT, "valid_jwt": sc.ValidJWT, "wrong_audience_jwt": sc.WrongAudienceJWT, "expired_jwt": sc.ExpiredJWT}[which]
	if jwt == "" {
		return "", fmt.Errorf("SWITCHBOARD_WIF_JWT=%s: the context holds no such JWT", which)
	}
	return jwt, nil
}
