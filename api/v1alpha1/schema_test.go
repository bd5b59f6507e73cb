package v1alpha1_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/kustomize"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// k8sClient talks to the real kube-apiserver started in TestMain.
var k8sClient client.Client

func TestMain(m *testing.M) {
	var env *testenv.Environment
	os.Exit(testenv.Main(m, &env, &k8sClient))
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "schema-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// objectFromYAML builds an object of the given kind whose spec is specYAML.
func objectFromYAML(t *testing.T, namespace, kind, name, specYAML string) *unstructured.Unstructured {
	t.Helper()
	var spec map[string]any
	if err := yaml.Unmarshal([]byte(specYAML), &spec); err != nil {
		t.Fatalf("test case spec is not YAML: %v", err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	obj.SetGroupVersionKind(mcpv1alpha1.GroupVersion.WithKind(kind))
	if kind != identityProvider {
		obj.SetNamespace(namespace)
	}
	obj.SetName(name)
	return obj
}

// identityProvider is the one cluster-scoped kind: its objects have no namespace, so
// test cases prefix their names with the test's namespace to stay apart.
const identityProvider = "MCPIdentityProvider"

// idpSpec is a valid MCPIdentityProvider spec with the issuer and username mapping given
// as YAML, and extra appended.
func idpSpec(issuer, username, extra string) string {
	return "issuer:\n" + issuer + "\nclaimMappings:\n  username: " + username + "\n" + extra
}

// manyHeaders returns a headers list of n distinct, valid headers as YAML.
func manyHeaders(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "\n      - {name: X-Header-%d, value: v}", i)
	}
	return b.String()
}

// manyServers returns a toolset servers list of n entries by name as YAML.
func manyServers(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "\n  - {name: server-%d}", i)
	}
	return b.String()
}

// manyGlobs returns a YAML flow list of n distinct globs.
func manyGlobs(n int) string {
	globs := make([]string, n)
	for i := range globs {
		globs[i] = fmt.Sprintf("tool_%d_*", i)
	}
	return "[" + strings.Join(globs, ", ") + "]"
}

func TestSchemaRejectsInvalidManifests(t *testing.T) {
	namespace := newNamespace(t)
	const server, policy, toolset, access = "MCPServer", "MCPEgressPolicy", "MCPToolset", "MCPAccessPolicy"
	const okRule = "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['*'], action: Allow}"
	const okTarget = "targetRefs: [{kind: MCPServer, name: github}]\n"
	httpSpec := func(httpYAML string) string { return "http:\n" + httpYAML }
	stdioSpec := func(stdioYAML string) string { return "stdio:\n" + stdioYAML }
	const okHTTP = "http:\n  url: https://mcp.example.com/mcp\n"

	cases := []struct {
		name string
		kind string
		spec string
		// want are fragments the API server's error message must contain: the field path
		// and what the user is told.
		want []string
		// secret is a part of the manifest that must not be echoed in the rejection.
		secret string
	}{
		// MCPServer: kind of server.
		{"neither http nor stdio", server, "description: nothing to run", []string{"exactly one of spec.http or spec.stdio must be set"}, ""},
		{"both http and stdio", server, okHTTP + "stdio:\n  image: busybox\n  command: [sh]", []string{"exactly one of spec.http or spec.stdio must be set"}, ""},
		{"description over 1 KiB", server, okHTTP + "description: " + strings.Repeat("d", 1025), []string{"spec.description", "Too long"}, ""},

		// MCPServer: http.url.
		{"url missing", server, httpSpec("  protocol: Auto"), []string{"spec.http.url", "Required value"}, ""},
		{"url relative", server, httpSpec("  url: /mcp"), []string{"spec.http.url", "absolute http:// or https:// URL"}, ""},
		{"url with another scheme", server, httpSpec("  url: ftp://mcp.example.com/mcp"), []string{"spec.http.url", "absolute http:// or https:// URL"}, ""},
		{"url without host", server, httpSpec("  url: 'https:///mcp'"), []string{"spec.http.url", "absolute http:// or https:// URL"}, ""},
		{"plain http without opt-in", server, httpSpec("  url: http://mcp.example.com/mcp"), []string{"spec.http", "url must use https; set allowInsecureHTTP: true"}, ""},
		{"url with user information", server, httpSpec("  url: https://alice:s3cret@mcp.example.com/mcp"), []string{"spec.http.url", "must not contain user information"}, "s3cret"},
		{"url with fragment", server, httpSpec("  url: https://mcp.example.com/mcp?token=hunter2#tools"), []string{"spec.http.url", "no fragment"}, "token=hunter2"},
		{"url over 2048 characters", server, httpSpec("  url: https://mcp.example.com/" + strings.Repeat("a", 2030)), []string{"spec.http.url", "Too long"}, "aaaaaaaaaaaaaaaa"},
		{"url that does not parse", server, httpSpec("  url: 'https://mcp example.com/mcp'"), []string{"spec.http.url", "url is not a valid URL"}, "mcp example"},
		{"unknown protocol", server, httpSpec("  url: https://mcp.example.com/mcp\n  protocol: WebSocket"), []string{"spec.http.protocol", "Unsupported value", "Auto"}, ""},

		// MCPServer: http.auth.oauth2.clientCredentials.
		{"client credentials without a credential", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c"), []string{"exactly one of clientSecret or privateKey must be set"}, ""},
		{"client credentials with both credentials", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        privateKey: {secretKeyRef: {name: s, key: p}}"), []string{"exactly one of clientSecret or privateKey must be set"}, ""},
		{"client credentials without a client ID", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientSecret: {secretKeyRef: {name: s, key: k}}"), []string{"clientID", "Required value"}, ""},
		{"auth beside an Authorization header", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: authorization, value: Bearer-hunter2}\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}"), []string{"auth and an Authorization header are mutually exclusive"}, "hunter2"},
		{"plain http token URL without opt-in", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        tokenURL: http://auth.example.com/token"), []string{"tokenURL must use https"}, ""},
		{"token URL with user information", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        tokenURL: https://u:pw@auth.example.com/token"), []string{"tokenURL must be an absolute http:// or https:// URL"}, ""},
		{"plain http issuer without opt-in", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        issuer: http://auth.example.com"), []string{"spec.http.auth.oauth2.clientCredentials.issuer", "issuer must use https"}, ""},
		{"issuer with a query", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        issuer: https://auth.example.com/?tenant=hunter2"), []string{"spec.http.auth.oauth2.clientCredentials.issuer", "no user information, query or fragment"}, "hunter2"},
		{"issuer that is not a URL", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        issuer: auth.example.com"), []string{"spec.http.auth.oauth2.clientCredentials.issuer", "absolute http:// or https:// URL"}, ""},
		{"private_key_jwt with a client secret", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        tokenEndpointAuthMethod: private_key_jwt"), []string{"tokenEndpointAuthMethod private_key_jwt needs privateKey"}, ""},
		{"unknown auth method", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        tokenEndpointAuthMethod: tls_client_auth"), []string{"tokenEndpointAuthMethod", "Unsupported value"}, ""},
		{"scope with a space", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: c\n        clientSecret: {secretKeyRef: {name: s, key: k}}\n        scopes: ['a b']"), []string{"scopes[0]", "should match"}, ""},
		{"auth without oauth2", server, httpSpec("  url: https://mcp.example.com/mcp\n  auth: {}"), []string{"auth must set oauth2"}, ""},

		// MCPServer: http.headers.
		{"header name not a token", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: 'X Api Key', value: v}"), []string{"spec.http.headers[0].name", "must be an HTTP token"}, ""},
		{"reserved header Host", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Host, value: evil.example.com}"), []string{"spec.http.headers[0]", "reserved for the transport"}, ""},
		{"reserved header in lower case", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: content-type, value: text/plain}"), []string{"spec.http.headers[0]", "reserved for the transport"}, ""},
		{"reserved header Content-Length", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Content-Length, value: '1'}"), []string{"reserved for the transport"}, ""},
		{"reserved header Accept", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: ACCEPT, value: '*/*'}"), []string{"reserved for the transport"}, ""},
		{"reserved header Transfer-Encoding", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Transfer-Encoding, value: chunked}"), []string{"reserved for the transport"}, ""},
		{"reserved header Connection", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Connection, value: close}"), []string{"reserved for the transport"}, ""},
		{"reserved header Upgrade", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Upgrade, value: websocket}"), []string{"reserved for the transport"}, ""},
		{"reserved header Mcp-Session-Id", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Mcp-Session-Id, value: fixed}"), []string{"reserved for the transport"}, ""},
		{"reserved header MCP-Protocol-Version", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: MCP-Protocol-Version, value: 2024-11-05}"), []string{"reserved for the transport"}, ""},
		{"reserved header Last-Event-ID", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: last-event-id, value: '7'}"), []string{"reserved for the transport"}, ""},
		{"any Mcp- header is reserved", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: mcp-anything, value: x}"), []string{"reserved for the transport"}, ""},
		{"duplicate header names differing in case", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Authorization, value: a}\n    - {name: authorization, value: b}"), []string{"spec.http.headers", "header names must be unique"}, ""},
		{"header with value and valueFrom", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - name: Authorization\n      value: inline\n      valueFrom: {secretKeyRef: {name: token, key: token}}"), []string{"spec.http.headers[0]", "exactly one of value or valueFrom"}, ""},
		{"header with neither value nor valueFrom", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - name: Authorization"), []string{"spec.http.headers[0]", "exactly one of value or valueFrom"}, ""},
		{"more than 32 headers", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:" + manyHeaders(33)), []string{"spec.http.headers", "must have at most 32 items"}, ""},
		{"secret name not a DNS name", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Authorization, valueFrom: {secretKeyRef: {name: My_Token, key: token}}}"), []string{"spec.http.headers[0].valueFrom.secretKeyRef.name", "DNS subdomain"}, ""},
		{"secret key missing", server, httpSpec("  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Authorization, valueFrom: {secretKeyRef: {name: token}}}"), []string{"spec.http.headers[0].valueFrom.secretKeyRef.key", "Required value"}, ""},
		{"CA bundle secret key invalid", server, httpSpec("  url: https://mcp.example.com/mcp\n  tls: {caBundle: {secretKeyRef: {name: ca, key: 'ca bundle'}}}"), []string{"spec.http.tls.caBundle.secretKeyRef.key", "letters, digits"}, ""},

		// MCPServer: stdio.
		{"stdio without image", server, stdioSpec("  command: [node]"), []string{"spec.stdio.image", "Required value"}, ""},
		{"stdio without command", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3"), []string{"spec.stdio.command", "Required value"}, ""},
		{"stdio with empty command", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: []"), []string{"spec.stdio.command", "at least 1 items"}, ""},
		{"stdio with an empty command word", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: ['']"), []string{"spec.stdio.command[0]", "at least 1 chars long"}, ""},
		{"maxSessions zero", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  maxSessions: 0"), []string{"spec.stdio.maxSessions", "greater than or equal to 1"}, ""},
		{"maxSessions above 64 without sessionMode", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  maxSessions: 65"), []string{"spec.stdio", "maxSessions above 64 needs sessionMode: Shared: each PerSession session runs its own process"}, ""},
		{"maxSessions above 64 in PerSession mode", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  sessionMode: PerSession\n  maxSessions: 1024"), []string{"spec.stdio", "maxSessions above 64 needs sessionMode: Shared"}, ""},
		{"maxSessions above 1024 in Shared mode", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  sessionMode: Shared\n  maxSessions: 1025"), []string{"spec.stdio.maxSessions", "less than or equal to 1024"}, ""},
		{"unknown sessionMode", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  sessionMode: PerClient"), []string{"spec.stdio.sessionMode", "Unsupported value", "PerSession", "Shared"}, ""},
		{"runAsNonRoot with runAsUser 0", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsNonRoot: true, runAsUser: 0}"), []string{"spec.stdio.securityContext", "runAsNonRoot: true contradicts runAsUser: 0 (root); set a non-zero runAsUser or drop runAsNonRoot"}, ""},
		{"negative runAsUser", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsUser: -1}"), []string{"spec.stdio.securityContext.runAsUser", "greater than or equal to 0"}, ""},
		{"runAsGroup beyond 2147483647", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsGroup: 2147483648}"), []string{"spec.stdio.securityContext.runAsGroup", "less than or equal to 2147483647"}, ""},
		{"negative fsGroup", server, stdioSpec("  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {fsGroup: -5}"), []string{"spec.stdio.securityContext.fsGroup", "greater than or equal to 0"}, ""},

		// MCPServer: timing.
		{"timeout below 1s", server, okHTTP + "timeout: 500ms", []string{"spec.timeout", "timeout must be between 1s and 5m"}, ""},
		{"timeout above 5m", server, okHTTP + "timeout: 10m", []string{"spec.timeout", "timeout must be between 1s and 5m"}, ""},
		{"timeout not a duration", server, okHTTP + "timeout: soon", []string{"spec.timeout", "should match"}, ""},
		{"probe interval below 5s", server, okHTTP + "healthCheck: {interval: 1s}", []string{"spec.healthCheck.interval", "between 5s and 1h"}, ""},
		{"probe interval above 1h", server, okHTTP + "healthCheck: {interval: 2h}", []string{"spec.healthCheck.interval", "between 5s and 1h"}, ""},
		{"failureThreshold zero", server, okHTTP + "healthCheck: {failureThreshold: 0}", []string{"spec.healthCheck.failureThreshold", "greater than or equal to 1"}, ""},
		{"failureThreshold above 20", server, okHTTP + "healthCheck: {failureThreshold: 21}", []string{"spec.healthCheck.failureThreshold", "less than or equal to 20"}, ""},

		// MCPServer: tool globs.
		{"glob with a slash", server, okHTTP + "tools: {allow: ['repo/*']}", []string{"spec.tools.allow", "tool globs may contain only"}, ""},
		{"glob with a space", server, okHTTP + "tools: {deny: ['delete *']}", []string{"spec.tools.deny", "tool globs may contain only"}, ""},
		{"glob over 128 characters", server, okHTTP + "tools: {allow: ['" + strings.Repeat("a", 129) + "']}", []string{"spec.tools.allow[0]", "Too long"}, ""},
		{"more than 64 globs", server, okHTTP + "tools: {deny: " + manyGlobs(65) + "}", []string{"spec.tools.deny", "must have at most 64 items"}, ""},

		// MCPServer: tool pinning.
		{"pinned digest without algorithm", server, okHTTP + "tools: {pinnedDigest: '" + strings.Repeat("a", 64) + "'}", []string{"spec.tools.pinnedDigest", `pinnedDigest must be "sha256:" followed by 64 lower-case hex digits`}, ""},
		{"pinned digest too short", server, okHTTP + "tools: {pinnedDigest: 'sha256:abc'}", []string{"spec.tools.pinnedDigest", "64 lower-case hex digits"}, ""},
		{"pinned digest in upper case", server, okHTTP + "tools: {pinnedDigest: 'sha256:" + strings.Repeat("A", 64) + "'}", []string{"spec.tools.pinnedDigest", "64 lower-case hex digits"}, ""},
		{"pinned digest too long", server, okHTTP + "tools: {pinnedDigest: 'sha256:" + strings.Repeat("a", 65) + "'}", []string{"spec.tools.pinnedDigest", "Too long"}, ""},

		// MCPServer: gateway limits.
		{"gateway maxSessions zero", server, okHTTP + "gateway: {maxSessions: 0}", []string{"spec.gateway.maxSessions", "greater than or equal to 1"}, ""},
		{"gateway maxSessions above 100000", server, okHTTP + "gateway: {maxSessions: 100001}", []string{"spec.gateway.maxSessions", "less than or equal to 100000"}, ""},
		{"gateway requestsPerSecond zero", server, okHTTP + "gateway: {requestsPerSecond: 0}", []string{"spec.gateway.requestsPerSecond", "greater than or equal to 1"}, ""},
		{"gateway requestsPerSecond above 100000", server, okHTTP + "gateway: {requestsPerSecond: 100001}", []string{"spec.gateway.requestsPerSecond", "less than or equal to 100000"}, ""},
		{"gateway maxSessionsPerCaller zero", server, okHTTP + "gateway: {maxSessionsPerCaller: 0}", []string{"spec.gateway.maxSessionsPerCaller", "greater than or equal to 1"}, ""},
		{"gateway maxSessionsPerCaller above 100000", server, okHTTP + "gateway: {maxSessionsPerCaller: 100001}", []string{"spec.gateway.maxSessionsPerCaller", "less than or equal to 100000"}, ""},
		{"gateway maxSessionsPerCaller above maxSessions", server, okHTTP + "gateway: {maxSessions: 4, maxSessionsPerCaller: 5}", []string{"spec.gateway", "maxSessionsPerCaller cannot exceed maxSessions"}, ""},

		// MCPEgressPolicy.
		{"cidr with prefix too long", policy, "egress:\n  - to: [{ipBlock: {cidr: 10.0.0.0/33}}]", []string{"spec.egress[0].to[0].ipBlock.cidr", "valid IPv4 or IPv6 CIDR"}, ""},
		{"cidr that is a host name", policy, "egress:\n  - to: [{ipBlock: {cidr: example.com}}]", []string{"spec.egress[0].to[0].ipBlock.cidr", "valid IPv4 or IPv6 CIDR"}, ""},
		{"except outside cidr", policy, "egress:\n  - to: [{ipBlock: {cidr: 10.20.0.0/16, except: [10.30.0.0/24]}}]", []string{"spec.egress[0].to[0].ipBlock", "every except entry must lie inside cidr"}, ""},
		{"except wider than cidr", policy, "egress:\n  - to: [{ipBlock: {cidr: 10.20.0.0/16, except: [10.0.0.0/8]}}]", []string{"every except entry must lie inside cidr"}, ""},
		{"IPv6 except in IPv4 cidr", policy, "egress:\n  - to: [{ipBlock: {cidr: 10.20.0.0/16, except: ['::/0']}}]", []string{"every except entry must lie inside cidr"}, ""},
		{"except not a CIDR", policy, "egress:\n  - to: [{ipBlock: {cidr: 10.20.0.0/16, except: [10.20.1.1]}}]", []string{"spec.egress[0].to[0].ipBlock.except", "every except entry must be a valid CIDR"}, ""},
		{"host with two wildcards", policy, "egress:\n  - to: [{host: '*.*.example.com'}]", []string{"spec.egress[0].to[0].host", "must be a DNS name"}, ""},
		{"host with an inner wildcard", policy, "egress:\n  - to: [{host: 'api.*.example.com'}]", []string{"spec.egress[0].to[0].host", "must be a DNS name"}, ""},
		{"host given as a URL", policy, "egress:\n  - to: [{host: 'https://api.example.com'}]", []string{"spec.egress[0].to[0].host", "must be a DNS name"}, ""},
		{"peer with host and ipBlock", policy, "egress:\n  - to: [{host: api.example.com, ipBlock: {cidr: 10.0.0.0/8}}]", []string{"spec.egress[0].to[0]", "exactly one of host or ipBlock"}, ""},
		{"empty peer", policy, "egress:\n  - to: [{}]", []string{"spec.egress[0].to[0]", "exactly one of host or ipBlock"}, ""},
		{"port zero", policy, "egress:\n  - ports: [{port: 0}]", []string{"spec.egress[0].ports[0].port", "greater than or equal to 1"}, ""},
		{"port above 65535", policy, "egress:\n  - ports: [{port: 70000}]", []string{"spec.egress[0].ports[0].port", "less than or equal to 65535"}, ""},
		{"maxHops above 10", policy, "redirects: {maxHops: 11}", []string{"spec.redirects.maxHops", "less than or equal to 10"}, ""},
		{"maxHops negative", policy, "redirects: {maxHops: -1}", []string{"spec.redirects.maxHops", "greater than or equal to 0"}, ""},
		{"unknown redirect policy", policy, "redirects: {policy: Follow}", []string{"spec.redirects.policy", "Unsupported value", "SameOrigin"}, ""},

		// MCPIdentityProvider.
		{"provider without a username prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email}", ""), []string{"spec.claimMappings.username.prefix", "Required value"}, ""},
		{"provider with an empty username prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: ''}", ""), []string{"spec.claimMappings.username.prefix", "at least 1 chars long"}, ""},
		{"provider with a system: username prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'system:'}", ""), []string{"spec.claimMappings.username.prefix", `prefix must not start with "system:"`}, ""},
		{"provider with a System:serviceaccount: prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: sub, prefix: 'System:serviceaccount:'}", ""), []string{"spec.claimMappings.username.prefix", `prefix must not start with "system:"`}, ""},
		{"provider with a system: groups prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "  groups: {claim: groups, prefix: 'system:'}"), []string{"spec.claimMappings.groups.prefix", `prefix must not start with "system:"`}, ""},
		{"provider with groups but no groups prefix", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "  groups: {claim: groups}"), []string{"spec.claimMappings.groups.prefix", "Required value"}, ""},
		{"provider without a username claim", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{prefix: 'oidc:'}", ""), []string{"spec.claimMappings.username.claim", "Required value"}, ""},
		{"provider with a plain http issuer without the flag", identityProvider, idpSpec("  url: http://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "url must use https; set allowInsecureHTTP: true"}, ""},
		{"provider with a plain http loopback issuer without the flag", identityProvider, idpSpec("  url: http://127.0.0.1:9998\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "url must use https; set allowInsecureHTTP: true"}, ""},
		{"provider with a plain http remote issuer and the flag", identityProvider, idpSpec("  url: http://login.example.com\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "a plain http issuer url must name a loopback host"}, ""},
		{"provider with a plain http issuer on a loopback look-alike", identityProvider, idpSpec("  url: http://127.0.0.1.example.com\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "a plain http issuer url must name a loopback host"}, ""},
		{"provider with a localhost user-information trick", identityProvider, idpSpec("  url: http://localhost@evil.example.com\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "no user information"}, ""},
		{"provider with an issuer of another scheme", identityProvider, idpSpec("  url: ftp://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "absolute https:// URL"}, ""},
		{"provider with an issuer query", identityProvider, idpSpec("  url: https://login.example.com/?tenant=hunter2\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.url", "no user information, query or fragment"}, "hunter2"},
		{"provider with a plain http discovery URL without the flag", identityProvider, idpSpec("  url: https://login.example.com\n  discoveryURL: http://127.0.0.1:9998/openid.json\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.discoveryURL", "discoveryURL must use https; set allowInsecureHTTP: true"}, ""},
		{"provider with a plain http remote discovery URL and the flag", identityProvider, idpSpec("  url: https://login.example.com\n  discoveryURL: http://login.example.com/openid.json\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.discoveryURL", "loopback host"}, ""},
		{"provider with a discovery URL query", identityProvider, idpSpec("  url: https://login.example.com\n  discoveryURL: https://login.example.com/openid.json?key=hunter2\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.discoveryURL", "no user information, query or fragment"}, "hunter2"},
		{"provider without audiences", identityProvider, idpSpec("  url: https://login.example.com", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.audiences", "Required value"}, ""},
		{"provider with an empty audience list", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: []", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.audiences", "at least 1 items"}, ""},
		{"provider with an empty audience", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: ['']", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.audiences[0]", "at least 1 chars long"}, ""},
		{"provider with 17 audiences", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: "+manyGlobs(17), "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.audiences", "must have at most 16 items"}, ""},
		{"provider with a prefix over 64 characters", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: '"+strings.Repeat("p", 65)+"'}", ""), []string{"spec.claimMappings.username.prefix", "Too long"}, ""},
		{"provider with an empty rule expression", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "claimValidationRules: [{expression: '', message: m}]"), []string{"spec.claimValidationRules[0].expression", "at least 1 chars long"}, ""},
		{"provider with a blank rule expression", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "claimValidationRules: [{expression: '   '}]"), []string{"spec.claimValidationRules[0].expression", "expression must not be blank"}, ""},
		{"provider with a rule expression over 1 KiB", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "claimValidationRules: [{expression: '"+strings.Repeat("x", 1025)+"'}]"), []string{"spec.claimValidationRules[0].expression", "Too long"}, ""},
		{"provider with introspection but no client secret", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "introspection: {clientID: gw}"), []string{"spec.introspection.clientSecret", "Required value"}, ""},
		{"provider token exchange over plain http without the flag", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: http://127.0.0.1:9998/token\n  namespaces: [team-a]"), []string{"spec.tokenExchange.tokenURL", "tokenURL must use https; set issuer.allowInsecureHTTP: true"}, ""},
		{"provider token exchange over plain http to a remote host", identityProvider, idpSpec("  url: http://127.0.0.1:9998\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: http://sts.example.com/token\n  namespaces: [team-a]"), []string{"spec.tokenExchange.tokenURL", "a plain http tokenURL must name a loopback host"}, ""},
		{"provider token exchange URL with user information", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://u:hunter2@sts.example.com/token\n  namespaces: [team-a]"), []string{"spec.tokenExchange.tokenURL", "tokenURL must be an absolute https:// URL"}, "hunter2"},
		{"provider token exchange without namespaces", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://sts.example.com/token"), []string{"spec.tokenExchange.namespaces", "Required value"}, ""},
		{"provider token exchange with an empty namespace list", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://sts.example.com/token\n  namespaces: []"), []string{"spec.tokenExchange.namespaces", "at least 1 items"}, ""},
		{"provider token exchange for every namespace and one more", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://sts.example.com/token\n  namespaces: ['*', team-a]"), []string{"spec.tokenExchange.namespaces", "must be the only entry of namespaces"}, ""},
		{"provider token exchange for a namespace that cannot exist", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://sts.example.com/token\n  namespaces: [Team_A]"), []string{"spec.tokenExchange.namespaces[0]", "should match"}, ""},
		{"provider token exchange with an authorization server with a query", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://sts.example.com/token\n  namespaces: [team-a]\n  authorizationServers: ['https://as.example.com/?k=hunter2']"), []string{"spec.tokenExchange.authorizationServers", "no user information, query or fragment"}, "hunter2"},
		{"token exchange without an identity provider", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      tokenExchange:\n        audience: a", []string{"spec.http.auth.oauth2.tokenExchange.identityProvider", "Required value"}, ""},
		{"token exchange naming no valid provider name", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      tokenExchange:\n        identityProvider: Corp_IdP", []string{"spec.http.auth.oauth2.tokenExchange.identityProvider", "identityProvider must be the name of an MCPIdentityProvider"}, ""},
		{"enterprise-managed with an identity provider token URL", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      enterpriseManaged:\n        clientID: c\n        identityProvider: {tokenURL: 'https://collect.example.net/token', clientID: gw}", []string{"spec.http.auth.oauth2.enterpriseManaged.identityProvider", "must be of type string"}, ""},
		{"per-user beside client credentials", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: c}\n      clientCredentials: {clientID: c, clientSecret: {secretKeyRef: {name: s, key: k}}}", []string{"spec.http.auth.oauth2", "perUser cannot be combined with clientCredentials, workloadIdentity, enterpriseManaged or tokenExchange"}, ""},
		{"per-user beside token exchange", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: c}\n      tokenExchange: {identityProvider: corp}", []string{"perUser cannot be combined with"}, ""},
		{"per-user without an identity provider", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {clientID: c}", []string{"spec.http.auth.oauth2.perUser.identityProvider", "Required value"}, ""},
		{"per-user with a client secret and no client", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientSecret: {secretKeyRef: {name: s, key: k}}}", []string{"spec.http.auth.oauth2.perUser.clientSecret", "clientSecret needs the clientID it belongs to"}, ""},
		{"per-user issuer over plain http without the flag", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: c, issuer: 'http://as.example.com'}", []string{"spec.http.auth.oauth2.perUser.issuer", "issuer must use https; set allowInsecureHTTP: true"}, ""},
		{"per-user issuer with a query", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: c, issuer: 'https://as.example.com/?k=hunter2'}", []string{"spec.http.auth.oauth2.perUser.issuer", "no user information, query or fragment"}, "hunter2"},
		{"per-user with a scope holding a space", server, "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: c, scopes: ['repo read']}", []string{"spec.http.auth.oauth2.perUser.scopes[0]", "should match"}, ""},
		{"provider per-user without resources", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: [team-a]\n  authorizationServers: [https://github.com/login/oauth]"), []string{"spec.perUser.resources", "Required value"}, ""},
		{"provider per-user without authorization servers", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: [team-a]\n  authorizationServers: []\n  resources: [https://api.githubcopilot.com/mcp]"), []string{"spec.perUser.authorizationServers", "at least 1 items"}, ""},
		{"provider per-user for every namespace and one more", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: ['*', team-a]\n  authorizationServers: [https://github.com/login/oauth]\n  resources: [https://api.githubcopilot.com/mcp]"), []string{"spec.perUser.namespaces", "must be the only entry of namespaces"}, ""},
		{"provider per-user resource with a query", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: [team-a]\n  authorizationServers: [https://github.com/login/oauth]\n  resources: ['https://mcp.example.com/?k=hunter2']"), []string{"spec.perUser.resources", "no user information, query or fragment"}, "hunter2"},
		{"provider with a CA Secret name not a DNS name", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]\n  certificateAuthority: {secretKeyRef: {name: My_CA, key: ca.crt}}", "{claim: email, prefix: 'oidc:'}", ""), []string{"spec.issuer.certificateAuthority.secretKeyRef.name", "DNS subdomain"}, ""},

		// MCPToolset.
		{"toolset without servers", toolset, "description: nothing", []string{"spec.servers", "Required value"}, ""},
		{"toolset with an empty server list", toolset, "servers: []", []string{"spec.servers", "at least 1 items"}, ""},
		{"toolset with more than 32 servers", toolset, "servers:" + manyServers(33), []string{"spec.servers", "must have at most 32 items"}, ""},
		{"toolset entry with name and selector", toolset, "servers:\n  - {name: github, selector: {matchLabels: {team: a}}}", []string{"spec.servers[0]", "exactly one of name or selector"}, ""},
		{"toolset entry with neither name nor selector", toolset, "servers:\n  - {prefix: gh_}", []string{"spec.servers[0]", "exactly one of name or selector"}, ""},
		{"toolset prefix with a slash", toolset, "servers:\n  - {name: github, prefix: 'gh/'}", []string{"spec.servers[0].prefix", "prefix may contain only"}, ""},
		{"toolset rename with a space", toolset, "servers: [{name: github}]\ntools:\n  overrides: [{name: gh_search, rename: 'search issues'}]", []string{"spec.tools.overrides[0].rename", "must match"}, ""},
		{"toolset rename over 64 characters", toolset, "servers: [{name: github}]\ntools:\n  overrides: [{name: gh_search, rename: '" + strings.Repeat("a", 65) + "'}]", []string{"spec.tools.overrides[0].rename", "Too long"}, ""},
		{"toolset override that changes nothing", toolset, "servers: [{name: github}]\ntools:\n  overrides: [{name: gh_search}]", []string{"spec.tools.overrides[0]", "must set rename, description or both"}, ""},
		{"toolset glob with a slash", toolset, "servers: [{name: github}]\ntools: {deny: ['gh/*']}", []string{"spec.tools.deny", "tool globs may contain only"}, ""},
		{"toolset unknown discovery", toolset, "servers: [{name: github}]\ndiscovery: Lazy", []string{"spec.discovery", "Unsupported value", "Search"}, ""},

		// MCPAccessPolicy.
		{"access policy with neither targetRefs nor targetSelector", access, okRule, []string{"set exactly one of targetRefs or targetSelector"}, ""},
		{"access policy with targetRefs and targetSelector", access, okTarget + "targetSelector: {matchLabels: {team: a}}\n" + okRule, []string{"set exactly one of targetRefs or targetSelector"}, ""},
		{"access policy target of an unknown kind", access, "targetRefs: [{kind: Deployment, name: web}]\n" + okRule, []string{"spec.targetRefs[0].kind", "Unsupported value", "MCPToolset"}, ""},
		{"access policy target without a name", access, "targetRefs: [{kind: MCPServer}]\n" + okRule, []string{"spec.targetRefs[0].name", "Required value"}, ""},
		{"access policy naming one target twice", access, "targetRefs: [{kind: MCPServer, name: a}, {kind: MCPServer, name: a}]\n" + okRule, []string{"spec.targetRefs[1]", "Duplicate value"}, ""},
		{"access policy with an empty targetRefs list", access, "targetRefs: []\n" + okRule, []string{"spec.targetRefs", "at least 1 items"}, ""},
		{"access policy unknown enforcement", access, okTarget + "enforcement: DryRun\n" + okRule, []string{"spec.enforcement", "Unsupported value", "Audit"}, ""},
		{"access policy subject without a name", access, okTarget + "rules:\n  - {subjects: [{kind: Group}], tools: ['*'], action: Allow}", []string{"spec.rules[0].subjects[0].name", "Required value"}, ""},
		{"access policy subject of an unknown kind", access, okTarget + "rules:\n  - {subjects: [{kind: Team, name: sre}], tools: ['*'], action: Allow}", []string{"spec.rules[0].subjects[0].kind", "Unsupported value", "ServiceAccount"}, ""},
		{"access policy ServiceAccount without a namespace", access, okTarget + "rules:\n  - {subjects: [{kind: ServiceAccount, name: triage}], tools: ['*'], action: Allow}", []string{"spec.rules[0].subjects[0]", "namespace is required for a ServiceAccount subject"}, ""},
		{"access policy Group with a namespace", access, okTarget + "rules:\n  - {subjects: [{kind: Group, name: sre, namespace: agents}], tools: ['*'], action: Allow}", []string{"spec.rules[0].subjects[0]", "not allowed for a User or Group subject"}, ""},
		{"access policy rule without subjects", access, okTarget + "rules:\n  - {tools: ['*'], action: Allow}", []string{"spec.rules[0].subjects", "Required value"}, ""},
		{"access policy rule naming nothing", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: [], action: Allow}", []string{"spec.rules[0]", "a rule must name tools, resources or prompts"}, ""},
		{"access policy rule without an action", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['*']}", []string{"spec.rules[0].action", "Required value"}, ""},
		{"access policy unknown action", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['*'], action: Ask}", []string{"spec.rules[0].action", "Unsupported value", "RequireApproval"}, ""},
		{"access policy tool glob with a slash", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['gh/*'], action: Allow}", []string{"spec.rules[0].tools", "tool globs may contain only"}, ""},
		{"access policy resource glob with a space", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], resources: ['file:///my docs/*'], action: Allow}", []string{"spec.rules[0].resources", "may not contain spaces"}, ""},
		{"access policy blank when", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['*'], action: Allow, when: '  '}", []string{"spec.rules[0].when", "must not be blank"}, ""},
		{"access policy when over 4 KiB", access, okTarget + "rules:\n  - {subjects: [{kind: User, name: alice}], tools: ['*'], action: Allow, when: '" + strings.Repeat("t", 4097) + "'}", []string{"spec.rules[0].when", "Too long"}, ""},
		{"access policy with more than 64 rules", access, okTarget + "rules:" + strings.Repeat("\n  - {subjects: [{kind: User, name: alice}], tools: ['*'], action: Allow}", 65), []string{"spec.rules", "must have at most 64 items"}, ""},
	}
	if len(cases) < 30 {
		t.Fatalf("the schema suite must cover at least 30 invalid manifests, has %d", len(cases))
	}

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := objectFromYAML(t, namespace, tc.kind, fmt.Sprintf("%s-invalid-%d", namespace, i), tc.spec)
			err := k8sClient.Create(context.Background(), obj)
			if err == nil {
				t.Fatalf("API server accepted an invalid %s:\n%s", tc.kind, tc.spec)
			}
			for _, fragment := range tc.want {
				if !strings.Contains(err.Error(), fragment) {
					t.Errorf("rejection message does not contain %q:\n%v", fragment, err)
				}
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Errorf("rejection message echoes %q from the manifest:\n%v", tc.secret, err)
			}
		})
	}
}

func TestSchemaAcceptsValidManifests(t *testing.T) {
	namespace := newNamespace(t)
	cases := []struct {
		name string
		kind string
		spec string
	}{
		{"plain http with opt-in", "MCPServer", "http:\n  url: http://127.0.0.1:8080/mcp\n  allowInsecureHTTP: true"},
		{"url with port, path and query", "MCPServer", "http:\n  url: HTTPS://mcp.example.com:8443/v1/mcp?tenant=acme"},
		{"inline and Secret headers", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  headers:\n    - {name: Authorization, valueFrom: {secretKeyRef: {name: gh.token, key: .token_1}}}\n    - {name: X-Tenant, value: acme}\n    - {name: \"X-Weird!#$%&'*+.^_`|~\", value: ok}"},
		{"exactly 32 headers", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  headers:" + manyHeaders(32)},
		{"bounds of timing fields", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\ntimeout: 5m\nhealthCheck: {interval: 1h, failureThreshold: 20}"},
		{"stdio at maxSessions 64", "MCPServer", "stdio:\n  image: ghcr.io/acme/server@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n  command: [node, dist/index.js]\n  maxSessions: 64"},
		{"stdio PerSession at maxSessions 64", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  sessionMode: PerSession\n  maxSessions: 64"},
		{"stdio Shared at maxSessions 1024", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  sessionMode: Shared\n  maxSessions: 1024"},
		{"non-root with a user, group and fsGroup", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsNonRoot: true, runAsUser: 10001, runAsGroup: 0, fsGroup: 2147483647}"},
		{"non-root with the image's user", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsNonRoot: true}"},
		{"root on purpose", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsNonRoot: false, runAsUser: 0}"},
		{"runAsGroup without runAsUser", "MCPServer", "stdio:\n  image: ghcr.io/acme/server:1.2.3\n  command: [node]\n  securityContext: {runAsGroup: 3000}"},
		{"pinned tools and gateway limits at their bounds", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\ntools: {pinnedDigest: 'sha256:" + strings.Repeat("0123456789abcdef", 4) + "'}\ngateway: {maxSessions: 100000, maxSessionsPerCaller: 100000, requestsPerSecond: 1}"},
		{"client credentials with a secret, discovered", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: my-client\n        clientSecret: {secretKeyRef: {name: vendor-oauth, key: secret}}\n        tokenEndpointAuthMethod: ''\n        scopes: [tools.read]\n        tokenURL: ''"},
		{"client credentials with a pinned issuer", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: my-client\n        clientSecret: {secretKeyRef: {name: vendor-oauth, key: secret}}\n        issuer: https://auth.example.com/tenants/acme"},
		{"client credentials with a loopback issuer over plain http", "MCPServer", "http:\n  url: http://127.0.0.1:8080/mcp\n  allowInsecureHTTP: true\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: my-client\n        clientSecret: {secretKeyRef: {name: vendor-oauth, key: secret}}\n        issuer: http://127.0.0.1:9090"},
		{"client credentials with a key and a loopback token URL", "MCPServer", "http:\n  url: http://127.0.0.1:8080/mcp\n  allowInsecureHTTP: true\n  headers: [{name: X-Tenant, value: acme}]\n  auth:\n    oauth2:\n      clientCredentials:\n        clientID: my-client\n        privateKey: {secretKeyRef: {name: vendor-oauth, key: key.pem}}\n        tokenEndpointAuthMethod: private_key_jwt\n        tokenURL: http://127.0.0.1:9090/token"},
		{"IPv6 block with except", "MCPEgressPolicy", "egress:\n  - to: [{ipBlock: {cidr: '2001:db8::/32', except: ['2001:db8:1::/48']}}]\n    ports: [{port: 1}, {port: 65535}]"},
		{"isolating policy", "MCPEgressPolicy", "serverSelector: {}\nredirects: {policy: Deny, maxHops: 0}"},
		{"provider of the issue", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]\n  certificateAuthority: {secretKeyRef: {name: login-ca, key: ca.crt}}\n  allowInsecureHTTP: false", "{claim: email, prefix: 'oidc:'}", "  groups: {claim: groups, prefix: 'oidc:'}\nclaimValidationRules:\n  - {expression: 'claims.email_verified == true', message: email must be verified}\nadvertise: true\nintrospection:\n  clientID: switchboard-gateway\n  clientSecret: {secretKeyRef: {name: login-introspection, key: client-secret}}")},
		{"provider with a token exchange", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: https://login.example.com/oauth/token?tenant=acme\n  clientSecret: {secretKeyRef: {name: sts, key: secret}}\n  namespaces: [team-a, team-b]\n  authorizationServers: [https://as.example.com, 'https://auth.example.com/tenants/acme']")},
		{"provider with a token exchange for every namespace over loopback http", identityProvider, idpSpec("  url: http://127.0.0.1:9998\n  audiences: [https://mcp.example.com]\n  allowInsecureHTTP: true", "{claim: email, prefix: 'oidc:'}", "tokenExchange:\n  clientID: gw\n  tokenURL: http://127.0.0.1:9998/token\n  namespaces: ['*']")},
		{"token exchange at an identity provider", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      tokenExchange:\n        identityProvider: corp.idp\n        audience: https://api.example.com\n        scopes: [read]"},
		{"enterprise-managed with an identity provider", "MCPServer", "http:\n  url: https://mcp.example.com/mcp\n  auth:\n    oauth2:\n      enterpriseManaged:\n        identityProvider: corp\n        clientID: gateway-at-github\n        clientSecret: {secretKeyRef: {name: gh-as, key: secret}}"},
		{"per-user authorization at the server's own authorization server", "MCPServer", "http:\n  url: https://api.githubcopilot.com/mcp\n  auth:\n    oauth2:\n      perUser:\n        identityProvider: corp\n        issuer: https://github.com/login/oauth\n        clientID: Iv1.switchboard\n        clientSecret: {secretKeyRef: {name: gh-app, key: secret}}\n        scopes: [repo, read:org]"},
		{"per-user with a discovered issuer and a public client", "MCPServer", "http:\n  url: https://mcp.atlassian.com/v1/sse\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, clientID: switchboard}"},
		{"per-user with a client registered dynamically", "MCPServer", "http:\n  url: https://mcp.linear.app/mcp\n  auth:\n    oauth2:\n      perUser: {identityProvider: corp, scopes: [read]}"},
		{"provider letting per-user servers register clients", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: [team-a]\n  authorizationServers: [https://mcp.linear.app]\n  resources: [https://mcp.linear.app/mcp]\n  dynamicClientRegistration: true")},
		{"provider with per-user authorization", identityProvider, idpSpec("  url: https://login.example.com\n  audiences: [https://mcp.example.com]", "{claim: email, prefix: 'oidc:'}", "perUser:\n  namespaces: [team-a, team-b]\n  authorizationServers: [https://github.com/login/oauth, https://auth.atlassian.com]\n  resources: [https://api.githubcopilot.com/mcp, https://mcp.atlassian.com]\n  scopes: [repo, 'read:org']")},
		{"provider on loopback 127.0.0.1 over plain http", identityProvider, idpSpec("  url: http://127.0.0.1:9998\n  audiences: [gateway]\n  allowInsecureHTTP: true", "{claim: sub, prefix: 'dev:'}", "")},
		{"provider on loopback [::1] over plain http", identityProvider, idpSpec("  url: 'http://[::1]:9998/realms/dev'\n  audiences: [gateway]\n  allowInsecureHTTP: true", "{claim: sub, prefix: 'dev:'}", "")},
		{"provider on localhost over plain http", identityProvider, idpSpec("  url: HTTP://LocalHost/\n  audiences: [gateway]\n  allowInsecureHTTP: true", "{claim: sub, prefix: 'dev:'}", "")},
		{"provider over https with the flag set", identityProvider, idpSpec("  url: https://login.example.com/tenants/acme\n  audiences: "+manyGlobs(16)+"\n  allowInsecureHTTP: true", "{claim: sub, prefix: 'a-system:'}", "")},
		{"toolset of the issue", "MCPToolset", "servers:\n  - {name: github, prefix: gh_}\n  - selector: {matchLabels: {team: support}}\ntools:\n  allow: ['gh_search_*', 'tickets_*']\n  deny: ['*_delete*']\n  overrides:\n    - {name: gh_search_issues, rename: search_issues, description: Search GitHub issues of the acme org.}\ndiscovery: Search"},
		{"toolset with an empty prefix and 32 servers", "MCPToolset", "servers:" + manyServers(31) + "\n  - {name: plain, prefix: ''}"},
		{"access policy of the issue", "MCPAccessPolicy", "targetRefs: [{kind: MCPServer, name: github}, {kind: MCPToolset, name: assistant}]\nenforcement: Enforce\nrules:\n  - subjects: [{kind: Group, name: 'oidc:finance'}, {kind: ServiceAccount, namespace: agents, name: triage}]\n    tools: ['get_*', 'list_*', 'search_*']\n    action: Allow\n    when: 'has(arguments.repo) && arguments.repo.startsWith(\"acme/\")'\n  - subjects: [{kind: Group, name: 'oidc:sre'}]\n    tools: ['*']\n    when: 'tool.annotations.destructiveHint == true'\n    action: RequireApproval\n  - subjects: [{kind: Group, name: 'system:authenticated'}]\n    tools: ['delete_*']\n    action: Deny"},
		{"access policy by selector in Audit mode with resources and prompts", "MCPAccessPolicy", "targetSelector: {matchLabels: {team: search}}\nenforcement: Audit\nrules:\n  - subjects: [{kind: User, name: 'oidc:alice@example.com'}]\n    resources: ['file:///repo/*']\n    prompts: ['review_*']\n    action: Allow"},
		{"access policy with an empty selector and no rules", "MCPAccessPolicy", "targetSelector: {}"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := objectFromYAML(t, namespace, tc.kind, fmt.Sprintf("%s-valid-%d", namespace, i), tc.spec)
			if err := k8sClient.Create(context.Background(), obj); err != nil {
				t.Fatalf("API server rejected a valid %s: %v", tc.kind, err)
			}
		})
	}
}

func TestSchemaAppliesDefaults(t *testing.T) {
	namespace := newNamespace(t)
	ctx := context.Background()
	server := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "defaults"},
		Spec: mcpv1alpha1.MCPServerSpec{
			HTTP:        &mcpv1alpha1.HTTPServerSpec{URL: "https://mcp.example.com/mcp"},
			HealthCheck: &mcpv1alpha1.HealthCheck{},
		},
	}
	if err := k8sClient.Create(ctx, server); err != nil {
		t.Fatalf("creating server: %v", err)
	}
	if got := server.Spec.HTTP.Protocol; got != mcpv1alpha1.HTTPProtocolAuto {
		t.Errorf("protocol defaulted to %q, want Auto", got)
	}
	if server.Spec.Timeout == nil || server.Spec.Timeout.Duration != 30*time.Second {
		t.Errorf("timeout defaulted to %v, want 30s", server.Spec.Timeout)
	}
	if hc := server.Spec.HealthCheck; hc.Interval == nil || hc.Interval.Duration != 30*time.Second || hc.FailureThreshold != 3 {
		t.Errorf("healthCheck defaulted to %+v, want interval 30s and failureThreshold 3", hc)
	}
}

func TestSchemaDefaultsAccessPolicyToEnforce(t *testing.T) {
	namespace := newNamespace(t)
	p := &mcpv1alpha1.MCPAccessPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "defaults"},
		Spec: mcpv1alpha1.MCPAccessPolicySpec{
			TargetSelector: &metav1.LabelSelector{},
			Rules: []mcpv1alpha1.AccessPolicyRule{{
				Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: "alice"}},
				Tools:    []string{"*"},
				Action:   mcpv1alpha1.AccessPolicyAllow,
			}},
		},
	}
	if err := k8sClient.Create(context.Background(), p); err != nil {
		t.Fatalf("creating policy: %v", err)
	}
	if got := p.Spec.Enforcement; got != mcpv1alpha1.AccessPolicyEnforce {
		t.Errorf("enforcement defaulted to %q, want Enforce", got)
	}
}

func TestSchemaDefaultsStdioSessions(t *testing.T) {
	namespace := newNamespace(t)
	server := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "stdio-defaults"},
		Spec: mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{
			Image: "ghcr.io/acme/server:1.2.3", Command: []string{"node"},
		}},
	}
	if err := k8sClient.Create(context.Background(), server); err != nil {
		t.Fatalf("creating server: %v", err)
	}
	if got := server.Spec.Stdio.SessionMode; got != mcpv1alpha1.StdioSessionModePerSession {
		t.Errorf("sessionMode defaulted to %q, want PerSession", got)
	}
	if got := server.Spec.Stdio.MaxSessions; got != 4 {
		t.Errorf("maxSessions defaulted to %d, want 4", got)
	}
	if server.Spec.Stdio.SecurityContext != nil {
		t.Errorf("securityContext defaulted to %+v, want none", server.Spec.Stdio.SecurityContext)
	}
}

// TestSamplesAreAccepted renders config/samples with kustomize, as a user applying them
// would, and creates every object against the real API server.
func TestSamplesAreAccepted(t *testing.T) {
	namespace := newNamespace(t)
	samples := filepath.Join(testenv.RepoRoot(), "config", "samples")
	objects, err := kustomize.RenderDir(samples)
	if err != nil {
		t.Fatal(err)
	}

	// Every sample file must be part of the kustomization, or this test would miss it.
	listed, err := os.ReadFile(filepath.Join(samples, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(samples, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if base := filepath.Base(file); base != "kustomization.yaml" && !strings.Contains(string(listed), base) {
			t.Errorf("sample %s is not listed in config/samples/kustomization.yaml", base)
		}
	}

	kinds := map[string]int{}
	for _, obj := range objects {
		if obj.GetKind() == identityProvider {
			obj.SetName(namespace + "-" + obj.GetName())
		} else {
			obj.SetNamespace(namespace)
		}
		if err := k8sClient.Create(context.Background(), obj); err != nil {
			t.Errorf("sample %s %s rejected: %v", obj.GetKind(), obj.GetName(), err)
		}
		kinds[obj.GetKind()]++
	}
	if kinds["MCPServer"] < 3 || kinds["MCPEgressPolicy"] < 1 || kinds["MCPToolset"] < 1 || kinds[identityProvider] < 1 || kinds["MCPAccessPolicy"] < 1 {
		t.Errorf("samples hold %v; want at least 3 MCPServers (Streamable HTTP, SSE, stdio), 1 MCPEgressPolicy, 1 MCPToolset, 1 MCPIdentityProvider and 1 MCPAccessPolicy", kinds)
	}
}

// TestEveryFieldIsDocumented walks the schemas the API server serves (what `kubectl
// explain` prints) and requires a description on every field.
func TestEveryFieldIsDocumented(t *testing.T) {
	for _, name := range []string{"mcpservers.mcp.switchboard.dev", "mcpegresspolicies.mcp.switchboard.dev", "mcptoolsets.mcp.switchboard.dev", "mcpidentityproviders.mcp.switchboard.dev", "mcpaccesspolicies.mcp.switchboard.dev"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, crd); err != nil {
			t.Fatalf("reading CRD %s: %v", name, err)
		}
		for _, version := range crd.Spec.Versions {
			var undocumented []string
			walkSchema("", version.Schema.OpenAPIV3Schema, &undocumented)
			sort.Strings(undocumented)
			for _, path := range undocumented {
				t.Errorf("%s %s: field %s has no description", name, version.Name, path)
			}
		}
	}
}

// walkSchema appends to undocumented the path of every property below schema that has no
// description. apiVersion, kind and metadata are documented by Kubernetes itself.
func walkSchema(path string, schema *apiextensionsv1.JSONSchemaProps, undocumented *[]string) {
	if schema == nil {
		return
	}
	for name, prop := range schema.Properties {
		child := path + "." + name
		if path == "" && (name == "apiVersion" || name == "kind" || name == "metadata") {
			continue
		}
		if strings.TrimSpace(prop.Description) == "" {
			*undocumented = append(*undocumented, child)
		}
		walkSchema(child, &prop, undocumented)
	}
	if schema.Items != nil {
		walkSchema(path+"[]", schema.Items.Schema, undocumented)
	}
}

// TestIdentityProviderIsClusterScoped checks what `kubectl get mcpidp` and `kubectl get
// mcp` rely on: the kind is cluster-scoped, with its short name and category.
func TestIdentityProviderIsClusterScoped(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: "mcpidentityproviders.mcp.switchboard.dev"}, crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Errorf("scope is %s, want Cluster", crd.Spec.Scope)
	}
	if names := crd.Spec.Names; !slices.Contains(names.ShortNames, "mcpidp") || !slices.Contains(names.Categories, "mcp") {
		t.Errorf("short names %v and categories %v, want mcpidp and mcp", names.ShortNames, names.Categories)
	}
}
