package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// conformanceClientEnv, set, makes the test binary the client under test of the MCP
// conformance suite's auth/enterprise-managed-authorization scenario instead of running
// tests (see runEnterpriseConformanceClient).
const conformanceClientEnv = "SWITCHBOARD_TEST_PERCALLER_CLIENT"

func init() {
	// In init, not TestMain: budget_heap_test.go's TestMain is built without -race.
	if os.Getenv(conformanceClientEnv) != "" {
		if err := runEnterpriseConformanceClient(); err != nil {
			fmt.Fprintln(os.Stderr, "percaller client:", err)
			os.Exit(1)
		}
		fmt.Println("percaller client: called test-tool")
		os.Exit(0)
	}
}

// runEnterpriseConformanceClient is the connector as the client of the scenario: the
// pool holds the scenario's server with enterpriseManaged credentials from
// MCP_CONFORMANCE_CONTEXT, and an Upstream acting for the caller whose ID token is the
// context's idp_id_token lists the tools and calls test-tool.
func runEnterpriseConformanceClient() error {
	var sc struct {
		ClientID         string `json:"client_id"`
		ClientSecret     string `json:"client_secret"`
		IDPClientID      string `json:"idp_client_id"`
		IDPIDToken       string `json:"idp_id_token"`
		IDPTokenEndpoint string `json:"idp_token_endpoint"`
	}
	if err := json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &sc); err != nil {
		return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %w", err)
	}
	p, err := NewPool(Options{})
	if err != nil {
		return err
	}
	defer p.Close()
	key := Key{"conformance", "enterprise"}
	serverURL := os.Args[len(os.Args)-1]
	// The cluster admin lists the scenario's authorization server with the identity
	// provider, as the scenario's server names it.
	authServers, err := scenarioAuthorizationServers(serverURL)
	if err != nil {
		return err
	}
	p.Ensure(key, Config{
		URL:      serverURL,
		Protocol: ProtocolStreamableHTTP,
		Timeout:  10 * time.Second,
		Egress:   allowAll{}, // the suite serves on localhost
		PerCaller: &PerCallerAuth{EnterpriseManaged: &EnterpriseManaged{
			IdentityProvider: IdentityProvider{Name: "conformance-idp", TokenURL: sc.IDPTokenEndpoint, ClientID: sc.IDPClientID,
				AuthorizationServers: authServers},
			ClientID: sc.ClientID, ClientSecret: sc.ClientSecret, AllowInsecureHTTP: true,
		}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	select {
	case <-p.Settled(key):
	case <-ctx.Done():
		return ctx.Err()
	}
	snap, _ := p.Snapshot(key)
	fmt.Printf("percaller client: operator session %s, tools per caller %v\n", snap.State, snap.ToolsPerCaller)
	if snap.LastError != nil {
		fmt.Printf("percaller client: operator session error %s\n", snap.LastError)
	}
	u, err := p.OpenUpstream(ctx, key, &Caller{Key: "conformance-user", Token: sc.IDPIDToken, Provider: "conformance-idp", Expiry: time.Now().Add(time.Hour)})
	if err != nil {
		return err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-percaller"}, nil)
	cs, err := client.Connect(ctx, &connTransport{u}, nil)
	if err != nil {
		_ = u.Close()
		return fmt.Errorf("initialize: %w", err)
	}
	defer func() { _ = cs.Close() }()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test-tool", Arguments: map[string]any{}}); err != nil {
		return fmt.Errorf("tools/call: %w", err)
	}
	return nil
}

var resultsSaved = regexp.MustCompile(`[Rr]esults saved to (.+)$`)

// TestEnterpriseManagedConformanceScenario runs the official suite's SEP-990 client
// scenario (@modelcontextprotocol/conformance 0.2.0-alpha.12, an extension scenario)
// with the connector as the client: the identity provider's exchange and the
// authorization server's jwt-bearer grant are judged by the suite, and every check must
// pass.
func TestEnterpriseManagedConformanceScenario(t *testing.T) {
	stdout, stderr := runClientScenario(t, conformanceClientEnv, "auth/enterprise-managed-authorization", "called test-tool")
	for _, secret := range []string{"eyJ", "test-token-"} {
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("the client's output carries %q", secret)
		}
	}
}

// runClientScenario runs the conformance suite 0.2.0-alpha.12's client scenario with
// this test binary as its client, made one by the environment variable clientEnv (see
// the init functions), fails the test on every failed check or when the client's stdout
// lacks done (unless done is empty: a client that must refuse), and returns the client's stdout and stderr. extra are more arguments of
// the suite's (--spec-version, say).
func runClientScenario(t *testing.T, clientEnv, scenario, done string, extra ...string) (string, string) {
	t.Helper()
	suite, err := testenv.ConformanceSuite2026()
	if err != nil {
		t.Fatalf("the MCP conformance suite 0.2.0-alpha.12 is needed: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "client")
	script := "#!/bin/sh\n" + clientEnv + "=1 exec '" + self + "' -test.run='^$' \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil { //nolint:gosec // a script the test runs
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := t.TempDir()
	args := append([]string{"client", "--command", wrapper, "--scenario", scenario, "-o", out}, extra...)
	cmd := exec.CommandContext(ctx, suite, args...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	output, _ := cmd.CombinedOutput()
	var dir string
	for line := range strings.Lines(string(output)) {
		if m := resultsSaved.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			dir = strings.TrimSpace(m[1])
		}
	}
	if dir == "" {
		t.Fatalf("the suite saved no results:\n%s", output)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "checks.json")) //nolint:gosec // a folder the suite named
	if err != nil {
		t.Fatalf("%v\n%s", err, output)
	}
	var checks []struct {
		ID, Name, Description, Status string
		ErrorMessage                  string `json:"errorMessage"`
	}
	if err := json.Unmarshal(raw, &checks); err != nil {
		t.Fatal(err)
	}
	stdout, _ := os.ReadFile(filepath.Join(dir, "stdout.txt")) //nolint:gosec // a folder the suite named
	stderr, _ := os.ReadFile(filepath.Join(dir, "stderr.txt")) //nolint:gosec // a folder the suite named
	passed, failed := 0, 0
	for _, c := range checks {
		if c.Status != "INFO" {
			t.Logf("%s %s", c.Status, c.ID)
		}
		switch c.Status {
		case "SUCCESS":
			passed++
		case "FAILURE":
			failed++
			t.Errorf("check %s failed: %s %s", c.ID, c.Description, c.ErrorMessage)
		}
	}
	t.Logf("%s: %d checks passed, %d failed; client: %s", scenario, passed, failed, strings.TrimSpace(string(stdout)))
	if passed == 0 || (done != "" && !strings.Contains(string(stdout), done)) {
		t.Errorf("the client did not complete: stdout %s\nstderr %s\n%s", stdout, stderr, output)
	}
	return string(stdout), string(stderr)
}

// scenarioAuthorizationServers returns the authorization servers the scenario's server
// names in its protected resource metadata (RFC 9728, at the path-suffixed well-known
// URL, then the root one): the ones an admin lists with the identity provider.
func scenarioAuthorizationServers(serverURL string) ([]string, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, err
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource" + u.Path, "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(u.Scheme + "://" + u.Host + path) //nolint:gosec,noctx // the scenario's own loopback server
		if err != nil {
			return nil, err
		}
		var prm struct {
			AuthorizationServers []string `json:"authorization_servers"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&prm)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil && len(prm.AuthorizationServers) > 0 {
			return prm.AuthorizationServers, nil
		}
	}
	return nil, fmt.Errorf("the scenario's server at %s names no authorization server", DisplayURL(serverURL))
}
