package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// Each person's own account at a SaaS-like MCP server, through the whole product:
// zitadel/oidc's example OP is both the organisation's OpenID provider (callers log in
// there and present its tokens to the gateway) and the vendor's authorization server,
// where each person authorizes Switchboard in their browser; the MCP server introspects
// every token it gets at the OP and answers whoami with its subject.
//
// alice, in a 2025-11-25 session, calls a tool and gets a URL elicitation (-32042) whose
// message shows a one-time code; her browser opens the URL, she enters the code, logs in
// at the OP and comes back to the gateway's callback; her session is sent
// notifications/elicitation/complete and her retried call reaches the server as her.
// bob, a 2026-07-28 client, gets the same as input_required and his client's retry runs
// as him. Neither's token serves the other, neither's own login token reaches the
// server, and the grants are ciphertext in Secrets. Another replica, started afresh,
// serves both from the store; alice revokes her grant there and is asked again.
func TestEachPersonAuthorizesAPerUserServerThroughTheGateway(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const (
		serverNamespace = "team-saas"
		serverName      = "vendor"
		systemNamespace = "switchboard-system"
	)
	gatewayAddr := freeAddr(t)
	issuer := testenv.StartZitadelOPWithAdminsRedirectingTo(t, "http://"+gatewayAddr+"/oauth2/callback")
	upstream := startIntrospectingServer(t, issuer)

	createAll(ctx, t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serverNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}})
	grantKey := make([]byte, 32)
	_, _ = rand.Read(grantKey)
	people := map[string]string{} // OP login name -> username the gateway knows them by
	for _, name := range testenv.ZitadelAdmins {
		subject, _, _ := strings.Cut(name, "@")
		people[name] = "oidc:" + subject + "@example.test"
	}
	objects := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "user-grant-keys"},
			Data: map[string][]byte{"2026-12-01": grantKey}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: "zitadel-client"},
			Data: map[string][]byte{"secret": []byte(testenv.ZitadelClientSecret)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: "vendor-client"},
			Data: map[string][]byte{"secret": []byte(testenv.ZitadelClientSecret)}},
		&mcpv1alpha1.MCPIdentityProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "zitadel"},
			Spec: mcpv1alpha1.MCPIdentityProviderSpec{
				Issuer:        mcpv1alpha1.IdentityIssuer{URL: issuer, Audiences: []string{testenv.ZitadelClientID}, AllowInsecureHTTP: true},
				ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "email", Prefix: "oidc:"}},
				Introspection: &mcpv1alpha1.TokenIntrospection{
					ClientID:     testenv.ZitadelClientID,
					ClientSecret: mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "zitadel-client", Key: "secret"}},
				},
				// The cluster admin says which namespaces' servers may send this
				// provider's people to which authorization servers, and to which
				// servers their tokens may go.
				PerUser: &mcpv1alpha1.IdentityPerUser{
					Namespaces:           []string{serverNamespace},
					AuthorizationServers: []string{issuer},
					Resources:            []string{upstream.url},
					Scopes:               []string{"openid", "offline_access"},
				},
			},
		},
		&mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: serverName},
			Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
				URL: upstream.url + "/mcp", Protocol: mcpv1alpha1.HTTPProtocolStreamableHTTP, AllowInsecureHTTP: true,
				Auth: &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{PerUser: &mcpv1alpha1.OAuth2PerUser{
					IdentityProvider: "zitadel",
					ClientID:         testenv.ZitadelClientID,
					ClientSecret:     &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "vendor-client", Key: "secret"}},
					Scopes:           []string{"openid", "offline_access"},
				}}},
			}},
		},
	}
	const agent = "triage" // a ServiceAccount that may use the server, and has no person
	objects = append(objects, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: agent}})
	objects = append(objects, useGrant(serverNamespace, serverName, append(slices.Collect(maps.Values(people)),
		"system:serviceaccount:"+serverNamespace+":"+agent)...)...)
	createAll(ctx, t, admin, objects...)
	grantsFlag := "--user-grants-key-secret=" + systemNamespace + "/user-grant-keys"
	gatewayURL, logs, stopFirst := startManagerWithGatewayAt(t, gatewayAddr, kubeconfig, systemNamespace, grantsFlag)

	idp := &mcpv1alpha1.MCPIdentityProvider{}
	waitReady(ctx, t, admin, client.ObjectKey{Name: "zitadel"}, idp, func() []metav1.Condition { return idp.Status.Conditions })
	server := &mcpv1alpha1.MCPServer{}
	waitReady(ctx, t, admin, client.ObjectKey{Namespace: serverNamespace, Name: serverName}, server, func() []metav1.Condition { return server.Status.Conditions })

	alice, bob := testenv.ZitadelAdmins[0], testenv.ZitadelAdmins[1]
	logins := map[string]string{} // the people's own login tokens at the organisation's provider
	for _, name := range testenv.ZitadelAdmins {
		logins[name] = testenv.ZitadelLoginAs(t, issuer, name).AccessToken
	}
	subjectOf := func(name string) string { s, _, _ := strings.Cut(name, "@"); return s }
	endpointAt := func(base string) string {
		return base + "/mcp/namespaces/" + serverNamespace + "/servers/" + serverName
	}

	// alice, a client of the session era with URL elicitation.
	completed := make(chan string, 4)
	aliceClient := mcp.NewClient(&mcp.Implementation{Name: "alice-agent", Version: "v0"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			completed <- req.Params.ElicitationID
		},
	})
	aliceSession, err := aliceClient.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpointAt(gatewayURL), HTTPClient: &http.Client{Transport: bearerTransport{token: logins[alice]}}, MaxRetries: -1,
	}, sessionEra)
	if err != nil {
		t.Fatalf("alice connecting to the gateway: %v", err)
	}
	if v := aliceSession.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("alice's client settled on %q", v)
	}
	defer aliceSession.Close()
	_, err = aliceSession.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	elicitation := urlElicitationOf(t, err)
	code := oneTimeCodeIn(t, elicitation.Message)
	t.Logf("alice's first call: -32042 with a URL on the gateway (%s...) and a message showing a one-time code", elicitation.URL[:len(gatewayURL)+len("/oauth2/authorize/")])
	if !strings.HasPrefix(elicitation.URL, gatewayURL+"/oauth2/authorize/") {
		t.Fatalf("the URL elicitation sends alice to %q; want the gateway's own page", elicitation.URL)
	}
	// The link alone is not enough: another person's browser with a wrong code gets nowhere.
	if status, body := testenvWrongCode(t, elicitation.URL); status == http.StatusOK && strings.Contains(body, "login") {
		t.Fatalf("a wrong code led to the OP's login page")
	}
	if status, body := testenv.ZitadelAuthorizeAtGateway(t, issuer, elicitation.URL, code, alice); status != http.StatusOK {
		t.Fatalf("alice's browser back at the gateway's callback: %d %s", status, body)
	}
	select {
	case id := <-completed:
		if id != elicitation.ElicitationID {
			t.Errorf("alice's session was told elicitation %q completed; she was asked %q", id, elicitation.ElicitationID)
		}
	case <-ctx.Done():
		t.Fatal("alice's session was never sent notifications/elicitation/complete")
	}
	if got := callWhoami(ctx, t, aliceSession); got != subjectOf(alice) {
		t.Fatalf("alice's retried call reached the server as %q; want %q", got, subjectOf(alice))
	}
	t.Logf("alice authorized in her browser; her session was told so and her retried call reached the server as %q", subjectOf(alice))

	// bob, a client of the sessionless era: the same question as input_required.
	bobAsked := 0
	bobClient := mcp.NewClient(&mcp.Implementation{Name: "bob-agent", Version: "v0"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			bobAsked++
			if req.Params.Mode != "url" || !strings.HasPrefix(req.Params.URL, gatewayURL+"/oauth2/authorize/") {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			status, body := testenv.ZitadelAuthorizeAtGateway(t, issuer, req.Params.URL, oneTimeCodeIn(t, req.Params.Message), bob)
			if status != http.StatusOK {
				t.Errorf("bob's browser back at the gateway's callback: %d %s", status, body)
			}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	connectBob := func(base string) *mcp.ClientSession {
		cs, err := bobClient.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: endpointAt(base), HTTPClient: &http.Client{Transport: bearerTransport{token: logins[bob]}}, MaxRetries: -1,
		}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatalf("bob connecting to the gateway: %v", err)
		}
		if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
			t.Fatalf("bob's client settled on %q", v)
		}
		return cs
	}
	bobSession := connectBob(gatewayURL)
	defer bobSession.Close()
	if got := callWhoami(ctx, t, bobSession); got != subjectOf(bob) {
		t.Fatalf("bob's call reached the server as %q; want %q", got, subjectOf(bob))
	}
	if bobAsked != 1 {
		t.Fatalf("bob was asked %d times; want once", bobAsked)
	}
	t.Logf("bob (2026-07-28) got input_required with the URL, authorized, and his client's retry reached the server as %q", subjectOf(bob))

	// An agent without a person is told what an admin can do instead, and is sent no link.
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := clientset.CoreV1().ServiceAccounts(serverNamespace).CreateToken(ctx, agent, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = mcp.NewClient(&mcp.Implementation{Name: "triage", Version: "v0"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: endpointAt(gatewayURL), HTTPClient: &http.Client{Transport: bearerTransport{token: tr.Status.Token}}, MaxRetries: -1,
	}, sessionEra)
	if err == nil || !strings.Contains(err.Error(), "workload") || strings.Contains(err.Error(), "/oauth2/") {
		t.Fatalf("a ServiceAccount's session with the perUser server: %v; want a refusal naming a workload credential, with no link", err)
	}
	t.Logf("the ServiceAccount %s was refused: %v", agent, err)

	// What reached the server: two people's own vendor tokens, never a login token.
	presented := map[string]bool{}
	for _, h := range upstream.authorizations() {
		tok, _ := strings.CutPrefix(h, "Bearer ")
		for name, login := range logins {
			if tok == login {
				t.Errorf("%s's own login token reached the MCP server", name)
			}
		}
		if tok != "" {
			presented[tok] = true
		}
	}
	if len(presented) != 2 {
		t.Errorf("the server saw %d distinct tokens; want 2, one per person", len(presented))
	}

	// Another replica, which has nothing in memory, serves both from the store; then
	// the first stops, as in a restart.
	secondURL, secondLogs, _ := startManagerWithGatewayAt(t, freeAddr(t), kubeconfig, systemNamespace, grantsFlag)
	aliceAgain := connectWhenServed(ctx, t, aliceClient, endpointAt(secondURL), logins[alice], sessionEra)
	defer aliceAgain.Close()
	stopFirst()
	if got := callWhoami(ctx, t, aliceAgain); got != subjectOf(alice) {
		t.Fatalf("on the second replica alice's call reached the server as %q", got)
	}
	bobAgain := connectBob(secondURL)
	defer bobAgain.Close()
	if got := callWhoami(ctx, t, bobAgain); got != subjectOf(bob) || bobAsked != 1 {
		t.Fatalf("on the second replica bob's call reached the server as %q after %d questions", got, bobAsked)
	}
	t.Logf("a second replica, started afresh, served alice and bob from their stored grants; the first stopped")

	// alice sees and revokes her own grant; her next call asks her again.
	view := authorizationOf(ctx, t, http.MethodGet, endpointAt(secondURL)+"/authorization", logins[alice])
	if !strings.Contains(view, `"authorized":true`) {
		t.Fatalf("alice's view of her grant: %s", view)
	}
	authorizationOf(ctx, t, http.MethodDelete, endpointAt(secondURL)+"/authorization", logins[alice])
	if view := authorizationOf(ctx, t, http.MethodGet, endpointAt(secondURL)+"/authorization", logins[alice]); !strings.Contains(view, `"authorized":false`) {
		t.Fatalf("after revoking, alice's view of her grant: %s", view)
	}
	_, err = aliceAgain.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	urlElicitationOf(t, err)
	if got := callWhoami(ctx, t, bobAgain); got != subjectOf(bob) {
		t.Fatalf("alice's revocation touched bob's grant: his call reached the server as %q", got)
	}
	t.Logf("alice revoked her grant at <server endpoint>/authorization and was asked to authorize again; bob was not")

	// The grants are Secrets of ciphertext; no token, code or link is in a log.
	var secrets corev1.SecretList
	if err := admin.List(ctx, &secrets, client.InNamespace(systemNamespace), client.HasLabels{"mcp.switchboard.dev/user-authorization"}); err != nil {
		t.Fatal(err)
	}
	var stored int
	for _, s := range secrets.Items {
		stored++
		for _, v := range s.Data {
			for tok := range presented {
				if strings.Contains(string(v), tok) {
					t.Errorf("Secret %s holds a person's token in the clear", s.Name)
				}
			}
		}
	}
	if stored == 0 {
		t.Errorf("no grant Secret in %s", systemNamespace)
	}
	all := strings.Join(append(logs.snapshot(), secondLogs.snapshot()...), "\n")
	for tok := range presented {
		if strings.Contains(all, tok) {
			t.Errorf("a manager's log holds a person's vendor token")
		}
	}
	for name, login := range logins {
		if strings.Contains(all, login) {
			t.Errorf("a manager's log holds %s's login token", name)
		}
	}
	if strings.Contains(all, code) || strings.Contains(all, elicitation.URL) {
		t.Errorf("a manager's log holds alice's one-time code or her authorization link")
	}
}

// sessionEra makes a go-sdk client speak 2025-11-25, with a session.
var sessionEra = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// urlElicitationOf returns the one URL elicitation of err, a -32042 error.
func urlElicitationOf(t *testing.T, err error) *mcp.ElicitParams {
	t.Helper()
	wire, ok := errors.AsType[*jsonrpc.Error](err)
	if !ok || wire.Code != mcp.CodeURLElicitationRequired {
		t.Fatalf("the call answered %v; want a URL elicitation (-32042)", err)
	}
	var data struct {
		Elicitations []*mcp.ElicitParams `json:"elicitations"`
	}
	if err := json.Unmarshal(wire.Data, &data); err != nil || len(data.Elicitations) != 1 || data.Elicitations[0].Mode != "url" {
		t.Fatalf("the -32042 error's data is %s", wire.Data)
	}
	return data.Elicitations[0]
}

var oneTimeCode = regexp.MustCompile(`\b[A-Z2-9]{4}-[A-Z2-9]{4}\b`)

// oneTimeCodeIn returns the one-time code an elicitation's message shows.
func oneTimeCodeIn(t *testing.T, message string) string {
	t.Helper()
	code := oneTimeCode.FindString(message)
	if code == "" {
		t.Fatalf("the elicitation's message shows no one-time code: %q", message)
	}
	return code
}

// testenvWrongCode is another browser opening link and entering a wrong code.
func testenvWrongCode(t *testing.T, link string) (int, string) {
	t.Helper()
	resp, err := http.PostForm(link, map[string][]string{"code": {"AAAA-AAAA"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body)
}

// callWhoami calls whoami and returns its text.
func callWhoami(ctx context.Context, t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call whoami = %+v, %v", res, err)
	}
	return texts(res.Content)
}

// authorizationOf sends method to a person's authorization endpoint with token.
func authorizationOf(ctx context.Context, t *testing.T, method, url, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, body)
	}
	return string(body)
}

// connectWhenServed connects client to endpoint once the replica serving it knows the
// server (it answers 404 until its informers have synced), within a minute.
func connectWhenServed(ctx context.Context, t *testing.T, client *mcp.Client, endpoint, token string, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearerTransport{token: token}}, MaxRetries: -1,
		}, opts)
		if err == nil {
			return cs
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("connecting to %s: %v", endpoint, last)
	return nil
}
