package controllers

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/switchboard-mcp/switchboard/connector"
)

func TestStatusURIDropsUserInfoAndQuery(t *testing.T) {
	cases := []struct {
		uri      string
		template bool
		want     string
	}{
		{uri: "file:///notes.txt", want: "file:///notes.txt"},
		{uri: "file:///notes.txt?sig=s3cret", want: "file:///notes.txt"},
		{uri: "https://alice:s3cret@docs.example.com/a?token=s3cret#top", want: "https://docs.example.com/a"},
		{uri: "https://s3cret@docs.example.com", want: "https://docs.example.com"},
		{uri: "https://docs.example.com/a#part", want: "https://docs.example.com/a#part"},
		// A '?' or '#' inside a malformed password does not keep the rest of it.
		{uri: "https://alice:pa?s3cret@docs.example.com/a", want: "https://docs.example.com/a"},
		{uri: "https://alice:pa#s3cret@docs.example.com/a", want: "https://docs.example.com/a"},
		// An '@' outside the authority is no user information.
		{uri: "mailto:alice@example.com", want: "mailto:alice@example.com"},
		{uri: "file:///home/@alice/notes", want: "file:///home/@alice/notes"},
		{uri: "ui://dashboard/app", want: "ui://dashboard/app"},
		{uri: "?s3cret", want: ""},
		// A template's own query expansions stay; a literal query goes.
		{uri: "search://docs{?q,lang}", template: true, want: "search://docs{?q,lang}"},
		{uri: "api://svc/{id}?key=s3cret{&q}", template: true, want: "api://svc/{id}"},
		{uri: "users://{userId}/profile", template: true, want: "users://{userId}/profile"},
		{uri: "https://bob:s3cret@{host}/x{?q}", template: true, want: "https://{host}/x{?q}"},
		{uri: "search://docs{?q}", want: "search://docs{"},
	}
	for _, tc := range cases {
		if got := statusURI(tc.uri, tc.template); got != tc.want {
			t.Errorf("statusURI(%q, template=%v) = %q, want %q", tc.uri, tc.template, got, tc.want)
		}
	}
}

// featureSession is a ready session whose server offers resources, templates and
// prompts, some of them with a credential in their URI.
func featureSession() *connector.Snapshot {
	snap := readySession("https://mcp.example.com:443/mcp")
	snap.Capabilities = connector.Capabilities{Tools: true, Resources: true, Prompts: true, Completions: true, ResourcesSubscribe: true}
	snap.Resources = []connector.Resource{
		{URI: "https://alice:s3cret@docs.example.com/b?token=s3cret", Name: "b", MIMEType: "text/html"},
		{URI: "file:///a.txt", Name: "a", MIMEType: "text/plain"},
		{URI: "https://docs.example.com/b?token=other", Name: "b again"},
		{URI: "test://same", Name: "same resource"},
		{URI: "?s3cret", Name: "nothing but a query"},
	}
	snap.ResourceTemplates = []connector.ResourceTemplate{
		{URITemplate: "test://same", Name: "same template"},
		{URITemplate: "file:///{path}", Name: "files"},
	}
	snap.Prompts = []connector.Prompt{
		{Name: "summarize", Title: "Summarize", Description: strings.Repeat("d", 2000)},
		{Name: "greet", Description: "Says hello"},
		{Name: "greet", Description: "A second greet"},
		{Name: ""},
	}
	return snap
}

func TestStatusListsResourcesAndPrompts(t *testing.T) {
	obj := httpObject()
	computeStatus(obj, &observation{session: featureSession(), egressAllowedBy: allowed})
	st := obj.Status

	var resources []string
	for _, r := range st.Resources {
		resources = append(resources, fmt.Sprintf("%s|%s|%s|%s", r.URI, r.URITemplate, r.Name, r.MIMEType))
	}
	want := []string{
		"file:///a.txt||a|text/plain",
		"|file:///{path}|files|",
		"https://docs.example.com/b||b|text/html",
		"test://same||same resource|",
		"|test://same|same template|",
	}
	if !slices.Equal(resources, want) {
		t.Errorf("status.resources:\n got %q\nwant %q", resources, want)
	}
	// One resource listed twice once its query is gone, one that is nothing but a query.
	if !st.ResourcesTruncated || st.ResourceCount != 7 {
		t.Errorf("resourcesTruncated %v, resourceCount %d; want true, 7", st.ResourcesTruncated, st.ResourceCount)
	}
	if text := fmt.Sprintf("%+v", st); strings.Contains(text, "s3cret") || strings.Contains(text, "alice") {
		t.Errorf("status carries a resource URI's credential: %s", text)
	}

	var prompts []string
	for _, p := range st.Prompts {
		prompts = append(prompts, fmt.Sprintf("%s|%s|%d", p.Name, p.Title, len(p.Description)))
	}
	if want := []string{"greet||10", "summarize|Summarize|256"}; !slices.Equal(prompts, want) {
		t.Errorf("status.prompts:\n got %q\nwant %q", prompts, want)
	}
	if !st.PromptsTruncated || st.PromptCount != 4 {
		t.Errorf("promptsTruncated %v, promptCount %d; want true (a repeated and an empty name), 4", st.PromptsTruncated, st.PromptCount)
	}
	if c := st.Capabilities; c == nil || !c.Completions || !c.ResourcesSubscribe || !c.Resources || !c.Prompts {
		t.Errorf("capabilities %+v", c)
	}
}

func TestStatusResourcesAndPromptsAreBounded(t *testing.T) {
	snap := readySession("https://mcp.example.com:443/mcp")
	for i := range 300 {
		snap.Resources = append(snap.Resources, connector.Resource{URI: fmt.Sprintf("test://r/%03d", i), Name: strings.Repeat("n", 300)})
		snap.Prompts = append(snap.Prompts, connector.Prompt{Name: fmt.Sprintf("p%03d", i), Title: strings.Repeat("t", 300)})
	}
	snap.Resources = append(snap.Resources, connector.Resource{URI: "test://" + strings.Repeat("x", 600)})
	obj := httpObject()
	computeStatus(obj, &observation{session: snap, egressAllowedBy: allowed})
	st := obj.Status
	if len(st.Resources) != 256 || !st.ResourcesTruncated || st.Resources[255].URI != "test://r/255" {
		t.Fatalf("listed %d resources (truncated %v), last %+v; want the first 256 by URI", len(st.Resources), st.ResourcesTruncated, st.Resources[len(st.Resources)-1])
	}
	if len(st.Prompts) != 256 || !st.PromptsTruncated {
		t.Fatalf("listed %d prompts (truncated %v); want 256", len(st.Prompts), st.PromptsTruncated)
	}
	if len(st.Resources[0].Name) != 256 || len(st.Prompts[0].Title) != 256 {
		t.Errorf("resource name %d bytes, prompt title %d bytes; want both cut to 256", len(st.Resources[0].Name), len(st.Prompts[0].Title))
	}
	for _, r := range st.Resources {
		if len(r.URI) > 512 {
			t.Errorf("a URI of %d bytes is listed", len(r.URI))
		}
	}
}

// TestStatusFeaturesDoNotChangeWithoutTheirLists: the fleet writes no status for a
// healthy probe, so the same lists, in any order the server sends them, give the same
// status.
func TestStatusFeaturesDoNotChangeWithoutTheirLists(t *testing.T) {
	obj := httpObject()
	computeStatus(obj, &observation{session: featureSession(), egressAllowedBy: allowed})
	before := obj.DeepCopy()

	snap := featureSession()
	slices.Reverse(snap.Resources[:2]) // not the two that collapse into one: the server's first of those stays
	slices.Reverse(snap.ResourceTemplates)
	slices.Reverse(snap.Prompts[:2])
	computeStatus(obj, &observation{session: snap, egressAllowedBy: allowed})
	if !equality.Semantic.DeepEqual(before.Status, obj.Status) {
		t.Errorf("status changed without a change of the lists:\n%+v\n%+v", before.Status, obj.Status)
	}

	snap.Prompts = append(snap.Prompts, connector.Prompt{Name: "new"})
	computeStatus(obj, &observation{session: snap, egressAllowedBy: allowed})
	if equality.Semantic.DeepEqual(before.Status.Prompts, obj.Status.Prompts) {
		t.Errorf("status.prompts did not change when a prompt was added")
	}
}
