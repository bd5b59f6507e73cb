package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/registrytest"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// importFile imports a testdata server.json, after checking it against the registry's
// schema, and returns the manifest's text and object.
func importFile(t *testing.T, file string, o importOptions) (string, *mcpv1alpha1.MCPServer, error) {
	t.Helper()
	o.file = filepath.Join("testdata", "import", file)
	raw, err := os.ReadFile(o.file)
	if err != nil {
		t.Fatal(err)
	}
	registrytest.ValidateServerJSON(t, raw)
	srv, err := readServerJSON(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := importManifest(srv, o)
	if err != nil {
		return "", nil, err
	}
	var obj mcpv1alpha1.MCPServer
	if err := yaml.UnmarshalStrict(out, &obj); err != nil {
		t.Fatalf("the manifest does not decode strictly: %v\n%s", err, out)
	}
	return string(out), &obj, nil
}

func TestImportMapsRegistryEntriesToManifests(t *testing.T) {
	t.Run("a remote with a secret header", func(t *testing.T) {
		text, obj, err := importFile(t, "remote-github.json", importOptions{namespace: "team-a"})
		if err != nil {
			t.Fatal(err)
		}
		h := obj.Spec.HTTP
		if obj.Name != "github-mcp-server" || obj.Namespace != "team-a" || h == nil || obj.Spec.Stdio != nil ||
			h.URL != "https://api.githubcopilot.com/mcp/" || h.Protocol != mcpv1alpha1.HTTPProtocolStreamableHTTP {
			t.Fatalf("manifest:\n%s", text)
		}
		if len(h.Headers) != 1 || h.Headers[0].Name != "Authorization" || h.Headers[0].Value != "" ||
			h.Headers[0].ValueFrom.SecretKeyRef != (mcpv1alpha1.SecretKeyReference{Name: "github-mcp-server-headers", Key: "Authorization"}) {
			t.Errorf("headers = %+v, want one read from Secret github-mcp-server-headers", h.Headers)
		}
		if obj.Annotations[annotationRegistryName] != "io.github.github/github-mcp-server" || obj.Annotations[annotationRegistryVersion] != "0.13.0" {
			t.Errorf("annotations = %v", obj.Annotations)
		}
		for _, want := range []string{"Create the Secret github-mcp-server-headers with the keys Authorization", `"Bearer {token}"`} {
			if !strings.Contains(text, want) {
				t.Errorf("the manifest's comment does not say %q:\n%s", want, text)
			}
		}
	})
	t.Run("an oci package run over stdio", func(t *testing.T) {
		text, obj, err := importFile(t, "oci-github.json", importOptions{name: "github", command: []string{"/server/github-mcp-server"}})
		if err != nil {
			t.Fatal(err)
		}
		s := obj.Spec.Stdio
		if s == nil || obj.Spec.HTTP != nil || s.Image != "ghcr.io/github/github-mcp-server:0.13.0" ||
			strings.Join(s.Command, " ") != "/server/github-mcp-server" ||
			strings.Join(s.Args, " ") != "stdio --toolsets=repos,issues,pull_requests" {
			t.Fatalf("manifest:\n%s", text)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range s.Env {
			env[e.Name] = e
		}
		if len(env) != 2 || env["GITHUB_TOOLSETS"].Value != "all" ||
			env["GITHUB_PERSONAL_ACCESS_TOKEN"].ValueFrom.SecretKeyRef.Name != "github-env" ||
			env["GITHUB_PERSONAL_ACCESS_TOKEN"].ValueFrom.SecretKeyRef.Key != "GITHUB_PERSONAL_ACCESS_TOKEN" {
			t.Errorf("env = %+v", s.Env)
		}
		// The optional GITHUB_HOST and --read-only are named, not dropped silently.
		for _, want := range []string{"left out, optional: GITHUB_HOST: GitHub Enterprise Server host", "left out, optional: --read-only"} {
			if !strings.Contains(text, want) {
				t.Errorf("the comment does not say %q:\n%s", want, text)
			}
		}
		// Without --command the entrypoint is a placeholder that says what to fill in.
		text, obj, err = importFile(t, "oci-github.json", importOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(obj.Spec.Stdio.Command, " ") != "REPLACE_ME_COMMAND" || !strings.Contains(text, "REPLACE_ME_COMMAND in spec.stdio.command") {
			t.Errorf("without --command:\n%s", text)
		}
	})
	t.Run("a remote with declared variables and headers", func(t *testing.T) {
		text, obj, err := importFile(t, "remote-variables.json", importOptions{secretName: "acme-credentials"})
		if err != nil {
			t.Fatal(err)
		}
		h := obj.Spec.HTTP
		if h.URL != "https://replace-me-tenant.mcp.acme.example/eu/mcp" || h.Protocol != mcpv1alpha1.HTTPProtocolStreamableHTTP {
			t.Errorf("url %q protocol %q, want the streamable-http remote with its tenant a placeholder", h.URL, h.Protocol)
		}
		if len(h.Headers) != 2 || h.Headers[0].ValueFrom.SecretKeyRef.Name != "acme-credentials" || h.Headers[1].ValueFrom.SecretKeyRef.Key != "X-Acme-Workspace" {
			t.Errorf("headers = %+v", h.Headers)
		}
		for _, want := range []string{"replace-me-tenant in spec.http.url: the URL variable tenant (required): Your Acme tenant ID",
			`URL variable region: the default "eu" is used`, "keys X-Api-Key, X-Acme-Workspace"} {
			if !strings.Contains(text, want) {
				t.Errorf("the comment does not say %q:\n%s", want, text)
			}
		}
	})
	t.Run("npm and pypi packages only", func(t *testing.T) {
		_, _, err := importFile(t, "npm-filesystem.json", importOptions{})
		if err == nil {
			t.Fatal("imported an entry with nothing Switchboard can run")
		}
		for _, want := range []string{"npm package @modelcontextprotocol/server-filesystem 2025.8.21", "pypi package mcp-server-filesystem 0.6.2", "oci"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	})
}

func TestImportReadsOneEntryOfARegistry(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "import", "remote-github.json"))
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.EscapedPath())
		if r.URL.EscapedPath() != "/v0.1/servers/io.github.github%2Fgithub-mcp-server/versions/latest" {
			http.Error(w, `{"error":"Server not found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"server":`+string(raw)+`,"_meta":{}}`)
	}))
	defer reg.Close()
	ctx := context.Background()
	srv, err := readServerJSON(ctx, importOptions{registry: reg.URL, server: "io.github.github/github-mcp-server", version: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	if srv.Name != "io.github.github/github-mcp-server" || len(srv.Remotes) != 1 {
		t.Errorf("read %+v", srv)
	}
	if _, err := readServerJSON(ctx, importOptions{registry: reg.URL, server: "com.example/missing", version: "latest"}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a missing entry: %v", err)
	}
	// An answer beyond the bound is refused, not read whole.
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte(" "), maxServerJSONBytes+10))
	}))
	defer big.Close()
	if _, err := readServerJSON(ctx, importOptions{registry: big.URL, server: "a/b", version: "latest"}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized answer: %v", err)
	}
}

// TestImportedManifestsPassAdmission creates every imported manifest on a real API server
// with the CRDs and the admission policy, as a user who may read the Secrets they name.
func TestImportedManifestsPassAdmission(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policy, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "admission", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(policy), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := admin.Create(ctx, &obj); err != nil {
			t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
	const ns = "imports"
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	author := func(name string, rules ...rbacv1.PolicyRule) client.Client {
		user, err := env.ControlPlane.AddUser(envtest.User{Name: name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"}, Verbs: []string{"get", "list", "create"}})
		for _, obj := range []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}},
		} {
			if err := admin.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		c, err := client.New(user.Config(), client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	importer := author("importer",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"},
			ResourceNames: []string{"github-mcp-server-headers", "github-env", "acme-credentials"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}})
	stranger := author("stranger")

	var manifests []*mcpv1alpha1.MCPServer
	for _, tt := range []struct {
		file string
		o    importOptions
	}{
		{"remote-github.json", importOptions{namespace: ns}},
		{"oci-github.json", importOptions{namespace: ns, name: "github", command: []string{"/server/github-mcp-server"}}},
		{"oci-github.json", importOptions{namespace: ns, name: "github-placeholder", secretName: "github-env"}},
		{"remote-variables.json", importOptions{namespace: ns, secretName: "acme-credentials"}},
	} {
		_, obj, err := importFile(t, tt.file, tt.o)
		if err != nil {
			t.Fatal(err)
		}
		manifests = append(manifests, obj)
	}
	// The policy is in force once it refuses the stranger, who may read no Secret.
	testutil.Eventually(t, 30*time.Second, "the admission policy to refuse a user who may not read the Secret", func() error {
		err := stranger.Create(ctx, manifests[0].DeepCopy(), client.DryRunAll)
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			return errors.New("admitted")
		}
		return nil
	})
	for _, obj := range manifests {
		if err := importer.Create(ctx, obj); err != nil {
			t.Errorf("creating the imported %s: %v", obj.Name, err)
		}
	}
}
