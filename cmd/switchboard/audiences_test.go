package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// With --gateway-audiences, the catalogue and the gateway accept only Kubernetes tokens
// issued for Switchboard: a token the API server takes (kubectl create token without
// --audience) is refused with 401, and the token they do take is refused by the API
// server, so a token an agent hands the gateway cannot be replayed against the cluster.
func TestGatewayAudiencesTakeOnlyTokensTheAPIServerRefuses(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const namespace, agent = "team-a", "agent"
	createAll(ctx, t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: agent}})
	gatewayURL, _ := startManagerWithGateway(t, kubeconfig, namespace, "--gateway-audiences=switchboard")

	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	token := func(audiences ...string) string {
		tr, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, agent,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("requesting a token for %v: %v", audiences, err)
		}
		return tr.Status.Token
	}
	apiServerToken, switchboardToken := token(), token("switchboard")

	// status answers a GET of the catalogue's server list and an initialize at a
	// gateway endpoint with the token, once the manager listens.
	status := func(tok string) (catalogue, gateway int) {
		get := func(method, path, body string) int {
			for {
				req, _ := http.NewRequestWithContext(ctx, method, gatewayURL+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					_ = resp.Body.Close()
					return resp.StatusCode
				}
				select {
				case <-ctx.Done():
					t.Fatalf("the manager never answered %s: %v", path, err)
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
		initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent","version":"v0"}}}`
		return get(http.MethodGet, "/api/v1/servers", ""),
			get(http.MethodPost, "/mcp/namespaces/"+namespace+"/servers/notes", initialize)
	}

	if c, g := status(apiServerToken); c != http.StatusUnauthorized || g != http.StatusUnauthorized {
		t.Errorf("a token for the API server: catalogue %d, gateway %d; want 401 from both", c, g)
	}
	// Authenticated: the catalogue lists what the agent may see (nothing), the gateway
	// finds no server it may use; neither is 401.
	if c, g := status(switchboardToken); c != http.StatusOK || g == http.StatusUnauthorized {
		t.Errorf("a token for switchboard: catalogue %d, gateway %d; want 200 and an authenticated refusal", c, g)
	}

	// The token the gateway takes is worthless at the API server.
	// Only the server's CA of the admin's TLS config: its client certificate would speak
	// for the admin.
	tls := rest.TLSClientConfig{CAData: env.Config.CAData, CAFile: env.Config.CAFile, ServerName: env.Config.ServerName}
	asAgent, err := kubernetes.NewForConfig(&rest.Config{Host: env.Config.Host, TLSClientConfig: tls, BearerToken: switchboardToken})
	if err != nil {
		t.Fatal(err)
	}
	_, err = asAgent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("the API server answered the switchboard token with %v; want 401 Unauthorized", err)
	}
	// While the token it refuses at the gateway is the agent's at the API server.
	apiServerClient, err := kubernetes.NewForConfig(&rest.Config{Host: env.Config.Host, TLSClientConfig: tls, BearerToken: apiServerToken})
	if err != nil {
		t.Fatal(err)
	}
	review, err := apiServerClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if want := "system:serviceaccount:" + namespace + ":" + agent; err != nil || review.Status.UserInfo.Username != want {
		t.Errorf("the API server answered the agent's own token with %v, %v; want user %s", review, err, want)
	}
}

// --gateway-audiences takes a comma-separated list and refuses what no token could name.
func TestGatewayAudiencesFlag(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  []string
		err   string
	}{
		{value: "switchboard", want: []string{"switchboard"}},
		{value: " switchboard , https://kubernetes.default.svc.cluster.local,", want: []string{"switchboard", "https://kubernetes.default.svc.cluster.local"}},
		{value: "", want: nil},
		{value: "switch board", err: "space or control character"},
		{value: "a\x00b", err: "space or control character"},
		{value: "a,a", err: "named twice"},
		{value: "a1,a2,a3,a4,a5,a6,a7,a8,a9,a10,a11,a12,a13,a14,a15,a16,a17", err: "at most 16"},
		{value: strings.Repeat("a", 2049), err: "longer than 2048"},
	} {
		got, err := parseAudiences(tt.value)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("parseAudiences(%.40q) = %v, %v; want an error saying %q", tt.value, got, err, tt.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseAudiences(%q) = %q, %v; want %q", tt.value, got, err, tt.want)
		}
	}
}
