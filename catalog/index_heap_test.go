package catalog

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// fleetTools is the tool set every server of a fleet publishes: a fleet runs the same MCP
// server many times, so the index sees the same names and descriptions over and over.
var fleetTools = []struct{ name, title, description string }{
	{"add_issue_comment", "Add issue comment", "Adds a comment to an existing issue in a repository, as the authenticated user."},
	{"create_branch", "Create branch", "Creates a new branch in a repository from the given base branch or commit."},
	{"create_issue", "Create issue", "Creates a new issue in a repository with a title, a body, labels and assignees."},
	{"create_pull_request", "Create pull request", "Opens a pull request from a head branch into a base branch of the repository."},
	{"get_file_contents", "Get file contents", "Returns the contents of a file or the listing of a directory at a given ref."},
	{"get_issue", "Get issue", "Returns the details of one issue: state, labels, assignees, comments and history."},
	{"get_me", "Get me", "Returns the profile of the authenticated user: login, name, email and organizations."},
	{"list_commits", "List commits", "Lists the commits of a branch, newest first, with their authors and messages."},
	{"list_issues", "List issues", "Lists the issues of a repository, filtered by state, labels, assignee or milestone."},
	{"list_pull_requests", "List pull requests", "Lists the pull requests of a repository, filtered by state, head or base branch."},
	{"mergePullRequest", "Merge pull request", "Merges a pull request with a merge commit, a squash or a rebase."},
	{"search_code", "Search code", "Searches code across repositories with the code search syntax and returns matching files."},
	{"search_repositories", "Search repositories", "Searches repositories by name, description, topics, language or owner."},
	{"update_issue", "Update issue", "Updates the title, body, state, labels or assignees of an existing issue."},
}

// fleetServer returns the i-th MCPServer of a fleet as the informer holds it: connected,
// ready and publishing fleetTools.
func fleetServer(i int) *mcpv1alpha1.MCPServer {
	readOnly, destructive := true, false
	tools := make([]mcpv1alpha1.ToolInfo, len(fleetTools))
	for k, t := range fleetTools {
		tools[k] = mcpv1alpha1.ToolInfo{
			Name:            t.name,
			Title:           t.title,
			Description:     t.description,
			ReadOnlyHint:    &readOnly,
			DestructiveHint: &destructive,
		}
	}
	ns, name := fmt.Sprintf("team-%02d", i%20), fmt.Sprintf("github-%05d", i)
	at := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "github-mcp"}},
		Spec:       mcpv1alpha1.MCPServerSpec{Description: "GitHub issues, pull requests and code of the team's repositories"},
		Status: mcpv1alpha1.MCPServerStatus{
			Conditions: []metav1.Condition{
				{Type: mcpv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded, LastTransitionTime: at},
				{Type: "Connected", Status: metav1.ConditionTrue, Reason: mcpv1alpha1.ReasonSucceeded, LastTransitionTime: at},
			},
			Transport:       mcpv1alpha1.Transport("StreamableHTTP"),
			Endpoint:        "http://" + name + "." + ns + ".svc:8080/mcp",
			ProtocolVersion: "2025-06-18",
			ServerInfo:      &mcpv1alpha1.ServerInfo{Name: "github-mcp-server", Version: "0.9.1", Title: "GitHub"},
			Capabilities:    &mcpv1alpha1.ServerCapabilities{Tools: true, ListChanged: true},
			Tools:           tools,
			ToolCount:       int32(len(tools)),
		},
	}
}

// liveHeap returns the bytes of live heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heapFleetServers is large enough that the index's own per-server cost dominates its
// fixed cost (the vocabulary of the shared tool set).
const heapFleetServers = 2000

// maxIndexBytesPerServer bounds the live heap the index keeps per server of the fleet:
// its entry (the catalogue's copy of the status) and its share of the postings. It is
// 1.5 times the 6,622 bytes measured on linux/amd64 with Go 1.26 (14,173 when every
// token's posting list kept a map from item to position).
const maxIndexBytesPerServer = 10000

// The index's live heap per server stays within its budget, and removing every server
// leaves nothing behind. A fleet of identical servers is the catalogue's largest case.
func TestIndexHeapPerServer(t *testing.T) {
	// Not parallel: the measurement counts every live byte of the test binary.
	objs := make([]*mcpv1alpha1.MCPServer, heapFleetServers)
	for i := range objs {
		objs[i] = fleetServer(i)
	}
	before := liveHeap()
	ix := newIndex()
	for _, obj := range objs {
		ix.upsert(newServerEntry(obj))
	}
	after := liveHeap()
	runtime.KeepAlive(ix)
	runtime.KeepAlive(objs)
	perServer := (int64(after) - int64(before)) / heapFleetServers
	t.Logf("index live heap: %d bytes per server (%d servers of %d tools)", perServer, heapFleetServers, len(fleetTools))
	if perServer > maxIndexBytesPerServer {
		t.Errorf("index keeps %d bytes of live heap per server, want at most %d", perServer, maxIndexBytesPerServer)
	}

	if got, _ := ix.searchTools(parseQuery("pull request"), nil, 10, everyTool); len(got) != 10 {
		t.Fatalf("search of the fleet found %d tools, want 10", len(got))
	}
	for _, obj := range objs {
		ix.delete(serverKey{namespace: obj.Namespace, name: obj.Name})
	}
	if len(ix.servers) != 0 || len(ix.serverList) != 0 || len(ix.toolList) != 0 || len(ix.nsList) != 0 {
		t.Errorf("after removing every server: %d servers, %d in order, %d tools, %d namespaces",
			len(ix.servers), len(ix.serverList), len(ix.toolList), len(ix.nsList))
	}
	for _, p := range []struct {
		name  string
		vocab []string
		lists int
	}{{"tool", ix.tools.vocab, len(ix.tools.lists)}, {"server", ix.serverText.vocab, len(ix.serverText.lists)}} {
		if len(p.vocab) != 0 || p.lists != 0 {
			t.Errorf("after removing every server the %s postings keep %d tokens and %d lists", p.name, len(p.vocab), p.lists)
		}
	}
}
