package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	apiv0 "github.com/modelcontextprotocol/registry/pkg/api/v0"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/registrytest"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// registryPublicURL is the gateway's public URL the registry tests configure.
const registryPublicURL = "https://gateway.switchboard.test"

// Secrets the registry tests put in specs; no answer may carry any of them.
const (
	querySecret      = "query-secret-5f1e"
	headerSecret     = "header-secret-9c2d"
	secretObjectName = "upstream-credentials-7a3b"
)

// registryResponse is one registry answer as a client decodes it: the registry's own
// types, with Switchboard's status read from _meta beside them.
type registryResponse struct {
	Server apiv0.ServerJSON `json:"server"`
	Meta   struct {
		Official *apiv0.RegistryExtensions `json:"io.modelcontextprotocol.registry/official"`
		Status   *catalog.RegistryStatus   `json:"dev.switchboard/status"`
	} `json:"_meta"`
}

type registryListResponse struct {
	Servers  []registryResponse `json:"servers"`
	Metadata apiv0.Metadata     `json:"metadata"`
}

// registryGet requests a registry path, checks the answer against the registry's
// OpenAPI document and schema (200 and 404), and that no secret of the specs is in it.
func (r *running) registryGet(tb testing.TB, token, path string) response {
	tb.Helper()
	resp := r.get(tb, token, path)
	for _, secret := range []string{querySecret, headerSecret, secretObjectName, ".example.com", token} {
		if secret != "" && strings.Contains(string(resp.body), secret) {
			tb.Fatalf("GET %s answered %s, which contains %q", path, resp.body, secret)
		}
	}
	if resp.code == http.StatusOK || resp.code == http.StatusNotFound {
		registrytest.ValidateResponse(tb, path, resp.code, resp.header.Get("Content-Type"), resp.body)
	}
	return resp
}

func (r *running) registryList(tb testing.TB, token, path string) registryListResponse {
	tb.Helper()
	resp := r.registryGet(tb, token, path)
	if resp.code != http.StatusOK {
		tb.Fatalf("GET %s: %d %s", path, resp.code, resp.body)
	}
	var l registryListResponse
	if err := json.Unmarshal(resp.body, &l); err != nil {
		tb.Fatal(err)
	}
	if l.Metadata.Count != len(l.Servers) {
		tb.Fatalf("GET %s: metadata.count %d for %d servers", path, l.Metadata.Count, len(l.Servers))
	}
	return l
}

// registryAll follows nextCursor from path (which has a query) to the end and returns
// every name, failing on a name seen twice.
func (r *running) registryAll(tb testing.TB, token, path string) ([]string, []registryResponse) {
	tb.Helper()
	var names []string
	var all []registryResponse
	next := path
	for pages := 0; ; pages++ {
		if pages > 1000 {
			tb.Fatal("more than 1000 pages")
		}
		l := r.registryList(tb, token, next)
		for _, s := range l.Servers {
			if slices.Contains(names, s.Server.Name) {
				tb.Fatalf("%s listed twice", s.Server.Name)
			}
			names = append(names, s.Server.Name)
			all = append(all, s)
		}
		if l.Metadata.NextCursor == "" {
			return names, all
		}
		next = path + "&cursor=" + url.QueryEscape(l.Metadata.NextCursor)
	}
}

// grantUse lets the ServiceAccount saNamespace/saName use resource (mcpservers or
// mcptoolsets) in ns: the objects names, or every one when names is empty; in every
// namespace when ns is empty. It waits until the authorizer says so.
func grantUse(tb testing.TB, ns, saNamespace, saName, resource string, names ...string) {
	tb.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("%s-%s-use-%s-%d", saNamespace, saName, resource, len(names))
	rule := rbacv1.PolicyRule{APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{resource}, Verbs: []string{"use"}, ResourceNames: names}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}}
	var objs []client.Object
	if ns == "" {
		objs = []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}},
		}
	} else {
		objs = []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{rule}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}},
		}
	}
	for _, obj := range objs {
		if err := k8sClient.Create(ctx, obj); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = k8sClient.Delete(context.Background(), obj) })
	}
	probe := ""
	if len(names) > 0 {
		probe = names[0]
	}
	user := "system:serviceaccount:" + saNamespace + ":" + saName
	testutil.Eventually(tb, waitTimeout, "RBAC for "+user, func() error {
		sar, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   user,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: "use", Group: mcpv1alpha1.GroupVersion.Group, Resource: resource, Name: probe,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if !sar.Status.Allowed {
			return fmt.Errorf("not allowed yet")
		}
		return nil
	})
}

// secretSpec gives a server an upstream URL with a query string and headers, one from
// a Secret: none of it may reach the registry.
func secretSpec(o *mcpv1alpha1.MCPServer) {
	o.Spec.HTTP.URL += "?api_key=" + querySecret
	o.Spec.HTTP.Headers = []mcpv1alpha1.HTTPHeader{
		{Name: "X-Tenant", Value: headerSecret},
		{Name: "Authorization", ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: secretObjectName, Key: "token"}}},
	}
}

// registryFixture is two namespaces of servers and toolsets, and three callers of
// different RBAC.
type registryFixture struct {
	c                      *running
	one, two               string
	tokenA, tokenB, tokenC string
	wantA, wantB           []string
	prefix                 string
	serverName             func(ns, name string) string
	toolsetName            func(ns, name string) string
}

func newRegistryFixture(t *testing.T, opts ...func(*catalog.Options)) *registryFixture {
	t.Helper()
	metadata, err := catalog.NewResourceMetadata(registryPublicURL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &registryFixture{prefix: "com.example.test"}
	f.c = startCatalog(t, catalog.AuthTokenReview, func(o *catalog.Options) {
		o.ResourceMetadata = metadata
		o.RegistryNamePrefix = f.prefix
		for _, opt := range opts {
			opt(o)
		}
	})
	f.serverName = func(ns, name string) string { return catalog.RegistryServerName(f.prefix, ns, name) }
	f.toolsetName = func(ns, name string) string { return catalog.RegistryToolsetName(f.prefix, ns, name) }
	f.one, f.two = newNamespace(t), newNamespace(t)
	for _, s := range []struct {
		ns   string
		spec serverSpec
	}{
		{f.one, serverSpec{name: "alpha", description: "Issues and pull requests", tools: []mcpv1alpha1.ToolInfo{tool("get_issue", "", ""), tool("list_issues", "", "")}, mutate: secretSpec}},
		{f.one, serverSpec{name: "beta", notReady: true, mutate: secretSpec}},
		{f.one, serverSpec{name: "gamma", transport: mcpv1alpha1.TransportSSE, description: strings.Repeat("A long description. ", 20)}},
		{f.two, serverSpec{name: "delta", mutate: secretSpec}},
		{f.two, serverSpec{name: "epsilon"}},
	} {
		createServer(t, s.ns, s.spec)
	}
	createToolset(t, f.one, "support", "alpha")
	createToolset(t, f.one, "hidden", "alpha")
	createToolset(t, f.two, "ops", "delta")

	// A may list in both namespaces; it may use every server of the first, the
	// toolset "support" there, and the server delta of the second.
	f.tokenA = newCaller(t, f.one, "agent-a", true)
	grantList(t, f.two, f.one, "agent-a")
	grantUse(t, f.one, f.one, "agent-a", "mcpservers")
	grantUse(t, f.one, f.one, "agent-a", "mcptoolsets", "support")
	grantUse(t, f.two, f.one, "agent-a", "mcpservers", "delta")
	// B may use everything in both namespaces, and list in the second only: a registry
	// shows what a caller may use, so it sees every entry of both.
	f.tokenB = newCaller(t, f.two, "agent-b", true)
	for _, ns := range []string{f.one, f.two} {
		grantUse(t, ns, f.two, "agent-b", "mcpservers")
		grantUse(t, ns, f.two, "agent-b", "mcptoolsets")
	}
	// C may list in both namespaces and use nothing: it sees nothing.
	f.tokenC = newCaller(t, f.two, "agent-c", true)
	grantList(t, f.one, f.two, "agent-c")

	f.wantA = []string{f.serverName(f.one, "alpha"), f.serverName(f.one, "beta"), f.serverName(f.one, "gamma"),
		f.toolsetName(f.one, "support"), f.serverName(f.two, "delta")}
	f.wantB = []string{f.serverName(f.one, "alpha"), f.serverName(f.one, "beta"), f.serverName(f.one, "gamma"),
		f.toolsetName(f.one, "support"), f.toolsetName(f.one, "hidden"),
		f.serverName(f.two, "delta"), f.serverName(f.two, "epsilon"), f.toolsetName(f.two, "ops")}
	slices.Sort(f.wantA)
	slices.Sort(f.wantB)

	// Wait for every entry with its status (the informer delivers creation and status
	// separately).
	for _, w := range []struct {
		token string
		want  []string
	}{{f.tokenA, f.wantA}, {f.tokenB, f.wantB}} {
		testutil.Eventually(t, waitTimeout, "the registry to list every entry with its status", func() error {
			names, all := f.c.registryAll(t, w.token, "/v0.1/servers?limit=100")
			for _, s := range all {
				if !s.Meta.Status.Ready && s.Meta.Status.Name != "beta" {
					return fmt.Errorf("%s has no status yet", s.Server.Name)
				}
			}
			if !slices.Equal(names, w.want) {
				return fmt.Errorf("listed %q, want %q", names, w.want)
			}
			return nil
		})
	}
	return f
}

func TestRegistryListsWhatEachCallerMayUse(t *testing.T) {
	f := newRegistryFixture(t)
	c := f.c

	// Each caller sees exactly its entries, on one page and over pages of every size.
	for _, w := range []struct {
		token string
		want  []string
	}{{f.tokenA, f.wantA}, {f.tokenB, f.wantB}} {
		for _, limit := range []int{1, 2, 3, 100} {
			names, _ := c.registryAll(t, w.token, fmt.Sprintf("/v0.1/servers?limit=%d", limit))
			if !slices.Equal(names, w.want) {
				t.Errorf("limit %d: listed %q, want %q", limit, names, w.want)
			}
		}
	}
	// A page of 2 says there is more; the last page says nothing.
	first := c.registryList(t, f.tokenA, "/v0.1/servers?limit=2")
	if len(first.Servers) != 2 || first.Metadata.NextCursor == "" {
		t.Errorf("first page of 2: %d servers, nextCursor %q", len(first.Servers), first.Metadata.NextCursor)
	}
	// A cursor belongs to its filters.
	resp := c.registryGet(t, f.tokenA, "/v0.1/servers?limit=2&search=a&cursor="+url.QueryEscape(first.Metadata.NextCursor))
	if resp.code != http.StatusBadRequest || !strings.Contains(string(resp.body), `"error"`) {
		t.Errorf("cursor of other filters: %d %s", resp.code, resp.body)
	}
	for _, bad := range []string{"limit=0", "limit=101", "limit=x", "updated_since=yesterday", "cursor=%21%21", "limit=1&limit=2",
		"cursor=" + strings.Repeat("A", 2000)} {
		if resp := c.registryGet(t, f.tokenA, "/v0.1/servers?"+bad); resp.code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want 400", bad, resp.code, resp.body)
		}
	}

	// Every entry is a server.json whose one remote is its gateway endpoint, named and
	// versioned as documented, with Switchboard's status in _meta.
	_, all := c.registryAll(t, f.tokenA, "/v0.1/servers?limit=100")
	byName := map[string]registryResponse{}
	for _, s := range all {
		byName[s.Server.Name] = s
	}
	alpha := byName[f.serverName(f.one, "alpha")]
	if got, want := alpha.Server.Remotes, registryPublicURL+"/mcp/namespaces/"+f.one+"/servers/alpha"; len(got) != 1 || got[0].Type != "streamable-http" || got[0].URL != want || len(got[0].Headers) != 0 {
		t.Errorf("alpha's remotes = %+v, want one streamable-http remote at %s", got, want)
	}
	if alpha.Server.Version != "0.0.1" || alpha.Server.Description != "Issues and pull requests" || len(alpha.Server.Packages) != 0 {
		t.Errorf("alpha = %+v", alpha.Server)
	}
	st := alpha.Meta.Status
	if st == nil || st.Kind != "MCPServer" || !st.Ready || st.ToolCount != 2 || st.Transport != "StreamableHTTP" || st.Namespace != f.one || st.Name != "alpha" {
		t.Errorf("alpha's status = %+v", st)
	}
	if o := alpha.Meta.Official; o == nil || o.Status != "active" || !o.IsLatest || o.PublishedAt.IsZero() || o.UpdatedAt.Before(o.PublishedAt) {
		t.Errorf("alpha's registry metadata = %+v", o)
	}
	if st := byName[f.serverName(f.one, "beta")].Meta.Status; st.Ready {
		t.Errorf("beta is not ready, status says %+v", st)
	}
	if d := byName[f.serverName(f.one, "gamma")].Server.Description; len([]rune(d)) != 100 || !strings.HasSuffix(d, "…") {
		t.Errorf("gamma's long description became %q, want it cut to 100 characters", d)
	}
	support := byName[f.toolsetName(f.one, "support")]
	if st := support.Meta.Status; st.Kind != "MCPToolset" || st.ToolCount != 2 || !st.Ready ||
		len(support.Server.Remotes) != 1 || support.Server.Remotes[0].URL != registryPublicURL+"/mcp/namespaces/"+f.one+"/toolsets/support" {
		t.Errorf("toolset support = %+v, status %+v", support.Server, st)
	}

	// Search is a case-insensitive substring of the name.
	for _, q := range []struct {
		search string
		want   []string
	}{
		{"ALPHA", []string{f.serverName(f.one, "alpha")}},
		{"toolset_", []string{f.toolsetName(f.one, "support")}},
		{"epsilon", nil}, // B's
		{f.two, []string{f.serverName(f.two, "delta")}},
	} {
		names, _ := c.registryAll(t, f.tokenA, "/v0.1/servers?limit=2&search="+url.QueryEscape(q.search))
		if !slices.Equal(names, q.want) {
			t.Errorf("search %q: %q, want %q", q.search, names, q.want)
		}
	}

	// One server's versions, a version, the latest; 404 for what A may not see.
	path := "/v0.1/servers/" + url.PathEscape(f.serverName(f.one, "alpha"))
	if l := c.registryList(t, f.tokenA, path+"/versions"); len(l.Servers) != 1 || l.Servers[0].Server.Name != alpha.Server.Name {
		t.Errorf("versions of alpha: %+v", l)
	}
	for _, v := range []string{"latest", "0.0.1"} {
		resp := c.registryGet(t, f.tokenA, path+"/versions/"+v)
		var got registryResponse
		if resp.code != http.StatusOK || json.Unmarshal(resp.body, &got) != nil || got.Server.Name != alpha.Server.Name {
			t.Errorf("version %s of alpha: %d %s", v, resp.code, resp.body)
		}
	}
	// The name unescaped, as some clients send it, finds the same entry.
	if resp := c.get(t, f.tokenA, "/v0.1/servers/"+f.serverName(f.one, "alpha")+"/versions/latest"); resp.code != http.StatusOK {
		t.Errorf("unescaped name: %d %s", resp.code, resp.body)
	}
	for _, p := range []string{
		path + "/versions/0.0.2",
		"/v0.1/servers/" + url.PathEscape(f.serverName(f.two, "epsilon")) + "/versions",
		"/v0.1/servers/" + url.PathEscape(f.serverName(f.two, "epsilon")) + "/versions/latest",
		"/v0.1/servers/" + url.PathEscape(f.toolsetName(f.one, "hidden")) + "/versions/latest",
		"/v0.1/servers/" + url.PathEscape(f.serverName(f.one, "nothing")) + "/versions",
	} {
		if resp := c.registryGet(t, f.tokenA, p); resp.code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s, want 404", p, resp.code, resp.body)
		}
	}
	// B, which may use alpha without listing its namespace, gets it; C, which may list
	// the namespace and use nothing, gets neither the entry nor any other.
	if resp := c.registryGet(t, f.tokenB, path+"/versions/latest"); resp.code != http.StatusOK {
		t.Errorf("B, which may use alpha, got %d %s", resp.code, resp.body)
	}
	if resp := c.registryGet(t, f.tokenC, path+"/versions/latest"); resp.code != http.StatusNotFound {
		t.Errorf("C, which may use nothing, got alpha: %d %s", resp.code, resp.body)
	}
	if names, _ := c.registryAll(t, f.tokenC, "/v0.1/servers?limit=100"); len(names) != 0 {
		t.Errorf("C, which may use nothing, was listed %q", names)
	}

	// The API is read-only.
	req, _ := http.NewRequest(http.MethodPost, c.base+"/v0.1/servers", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+f.tokenA)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

// A request reviews a bounded number of entries: a caller who may use few of many gets
// short pages, each ending with a cursor, and every entry it may use over the pages.
func TestRegistryReviewsABoundedNumberOfEntriesPerRequest(t *testing.T) {
	f := newRegistryFixture(t, catalog.WithRegistryReviews(2))
	first := f.c.registryList(t, f.tokenA, "/v0.1/servers?limit=100")
	if first.Metadata.NextCursor == "" || len(first.Servers) >= len(f.wantA) {
		t.Errorf("a request that may review 2 entries listed %d of %d with cursor %q", len(first.Servers), len(f.wantA), first.Metadata.NextCursor)
	}
	if names, _ := f.c.registryAll(t, f.tokenA, "/v0.1/servers?limit=100"); !slices.Equal(names, f.wantA) {
		t.Errorf("over the pages A was listed %q, want %q", names, f.wantA)
	}
}

func TestRegistryUpdatedSinceAndVersion(t *testing.T) {
	f := newRegistryFixture(t)
	c := f.c
	_, all := c.registryAll(t, f.tokenA, "/v0.1/servers?limit=100")
	var latest time.Time
	for _, s := range all {
		if s.Meta.Official.UpdatedAt.After(latest) {
			latest = s.Meta.Official.UpdatedAt
		}
	}
	since := func(t time.Time) string { return url.QueryEscape(t.UTC().Format(time.RFC3339Nano)) }
	if names, _ := c.registryAll(t, f.tokenA, "/v0.1/servers?updated_since="+since(latest)); len(names) != 0 {
		t.Errorf("updated since the latest update: %q, want nothing", names)
	}
	if names, _ := c.registryAll(t, f.tokenA, "/v0.1/servers?updated_since="+since(latest.Add(-time.Hour))); !slices.Equal(names, f.wantA) {
		t.Errorf("updated since an hour before: %q, want %q", names, f.wantA)
	}

	// A spec change is a new version, and an update since then.
	var gamma mcpv1alpha1.MCPServer
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: f.one, Name: "gamma"}, &gamma); err != nil {
		t.Fatal(err)
	}
	gamma.Spec.Description = "Weather forecasts"
	if err := k8sClient.Update(context.Background(), &gamma); err != nil {
		t.Fatal(err)
	}
	gammaName := f.serverName(f.one, "gamma")
	testutil.Eventually(t, waitTimeout, "gamma's new version", func() error {
		names, got := c.registryAll(t, f.tokenA, "/v0.1/servers?updated_since="+since(latest))
		if !slices.Equal(names, []string{gammaName}) {
			return fmt.Errorf("updated since: %q", names)
		}
		if s := got[0].Server; s.Version != "0.0.2" || s.Description != "Weather forecasts" {
			return fmt.Errorf("gamma is %s %q", s.Version, s.Description)
		}
		return nil
	})
	if names, _ := c.registryAll(t, f.tokenA, "/v0.1/servers?version=0.0.2"); !slices.Equal(names, []string{gammaName}) {
		t.Errorf("version=0.0.2: %q", names)
	}
	if names, _ := c.registryAll(t, f.tokenA, "/v0.1/servers?version=latest&limit=2"); !slices.Equal(names, f.wantA) {
		t.Errorf("version=latest: %q, want %q", names, f.wantA)
	}
	if resp := c.registryGet(t, f.tokenA, "/v0.1/servers/"+url.PathEscape(gammaName)+"/versions/0.0.1"); resp.code != http.StatusNotFound {
		t.Errorf("the old version: %d, want 404", resp.code)
	}
	// Once deleted, an entry is gone.
	if err := k8sClient.Delete(context.Background(), &gamma); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "gamma to be gone", func() error {
		if resp := c.registryGet(t, f.tokenA, "/v0.1/servers/"+url.PathEscape(gammaName)+"/versions"); resp.code != http.StatusNotFound {
			return fmt.Errorf("still %d", resp.code)
		}
		return nil
	})
}

func TestRegistryRefusesAnonymousCallersWithTheResourceMetadata(t *testing.T) {
	f := newRegistryFixture(t)
	for _, p := range []string{"/v0.1/servers", "/v0.1/servers/" + url.PathEscape(f.serverName(f.one, "alpha")) + "/versions/latest"} {
		resp := f.c.get(t, "", p)
		want := `Bearer resource_metadata="` + registryPublicURL + `/.well-known/oauth-protected-resource/v0.1"`
		if resp.code != http.StatusUnauthorized || resp.header.Get("WWW-Authenticate") != want {
			t.Errorf("anonymous GET %s: %d, WWW-Authenticate %q, want 401 with %s", p, resp.code, resp.header.Get("WWW-Authenticate"), want)
		}
		if strings.Contains(string(resp.body), "alpha") {
			t.Errorf("anonymous GET %s answered %s", p, resp.body)
		}
	}
	// The metadata it names is served.
	resp := f.c.get(t, "", "/.well-known/oauth-protected-resource/v0.1")
	var md struct {
		Resource string `json:"resource"`
	}
	if resp.code != http.StatusOK || json.Unmarshal(resp.body, &md) != nil || md.Resource != registryPublicURL+"/v0.1" {
		t.Errorf("resource metadata of /v0.1: %d %s", resp.code, resp.body)
	}
	// A bad token is refused the same way.
	if resp := f.c.get(t, "not-a-token", "/v0.1/servers"); resp.code != http.StatusUnauthorized {
		t.Errorf("bad token: %d", resp.code)
	}
}
