package gateway

// A toolset serves its origins' resources, resource templates, prompts and completions
// besides their tools, as one MCP server would: listed through the session's go-sdk
// server (which pages the lists, answers both eras and tells the client of changes),
// each read, prompt, completion and subscription routed to the one origin that owns
// what it names. Exposed URIs and prompt names are internal/toolsets' (ExposeFeatures):
// the controller publishes the same ones in status.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/toolsets"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/policy"
)

// featureRoutes is where the session's exposed resources, templates and prompts go.
type featureRoutes struct {
	resources map[string]toolsets.Feature // by exposed URI
	templates map[string]toolsets.Feature // by exposed URI template
	prompts   map[string]toolsets.Feature // by exposed name
	// matchers match a URI against each exposed template, as go-sdk's server does.
	matchers map[string]*regexp.Regexp
}

// listNews tells a client of a list's changes it has not seen: go-sdk notifies every
// change to what a server registers, including the first registration that answers
// the client's first list. The version goes up before a change and is applied after it
// (the notification go-sdk sends for it, after a short delay from another goroutine, is
// then never taken for news the client has listed), and a list taken while a change is
// under way, which may show either side of it, does not count as seen.
type listNews struct{ version, applied, seen uint64 }

func (n *listNews) listed() {
	n.seen = 0
	if n.applied == n.version {
		n.seen = n.version
	}
}

func (n *listNews) stale() bool { return n.seen != n.version || n.applied != n.version }

// featureMethod reports whether method is one of the client's requests about resources,
// prompts and completions, or a sessionless client's subscriptions/listen (which may ask
// for their list changes): the first of them has the session list its origins' features
// and keep them current, so that an origin's change reaches the client.
func featureMethod(method string) bool {
	return strings.HasPrefix(method, "resources/") || strings.HasPrefix(method, "prompts/") ||
		method == "completion/complete" || method == "subscriptions/listen"
}

// toolsetCapabilities are what a toolset session offers: tools and logging always, and
// resources (with subscriptions), prompts and completions when one of the toolset's
// Ready origins the caller may use offers them (as the pool's live session, or else its
// MCPServer status, records). A toolset always lists changes: it announces its own.
func (s *toolsetSession) toolsetCapabilities(ctx context.Context) *mcp.ServerCapabilities {
	caps := &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true},
		Logging: &mcp.LoggingCapabilities{}} //nolint:staticcheck // origins' log messages are relayed while servers still send them
	ts := s.g.toolset(s.key)
	if ts == nil {
		return caps
	}
	selected, _ := toolsets.Select(ts, s.g.serversIn(ts.Namespace))
	for _, sel := range selected {
		var offered connector.Capabilities
		if c := sel.Server.Status.Capabilities; c != nil {
			offered = connector.Capabilities{Resources: c.Resources, Prompts: c.Prompts, Completions: c.Completions, ResourcesSubscribe: c.ResourcesSubscribe}
		}
		if snap, ok := s.g.opts.Pool.Snapshot(connector.Key{Namespace: ts.Namespace, Name: sel.Name}); ok && snap.State == connector.StateReady {
			// The pool's live session knows first when the server changed.
			offered = snap.Capabilities
		}
		if !sel.Ready() || (!offered.Resources && !offered.Prompts) || !s.mayUse(ctx, sel.Name) {
			continue
		}
		if offered.Resources {
			if caps.Resources == nil {
				caps.Resources = &mcp.ResourceCapabilities{ListChanged: true}
			}
			caps.Resources.Subscribe = caps.Resources.Subscribe || offered.ResourcesSubscribe
		}
		if offered.Prompts {
			caps.Prompts = &mcp.PromptCapabilities{ListChanged: true}
		}
		if offered.Completions {
			caps.Completions = &mcp.CompletionCapabilities{}
		}
	}
	return caps
}

// listFeatures returns the origin's resources, templates and prompts, listing them over
// its upstream session when they are not known.
func (o *origin) listFeatures(ctx context.Context, s *toolsetSession) (*connector.Features, error) {
	o.mu.Lock()
	f := o.features
	o.mu.Unlock()
	if f != nil {
		return f, nil
	}
	if _, err := o.open(s); err != nil {
		return nil, err
	}
	o.mu.Lock()
	up, cs := o.up, o.cs
	o.mu.Unlock()
	f, err := up.ListFeatures(ctx, cs)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.features = f
	o.mu.Unlock()
	return f, nil
}

// exposeFeatures computes the resources, templates and prompts the session serves, as
// definitions under their exposed names, from the origins that passed expose's checks.
func (s *toolsetSession) exposeFeatures(ctx context.Context, ts *mcpv1alpha1.MCPToolsetSpec, usable []toolsets.Selected) (featureRoutes, map[string]any) {
	routes := featureRoutes{resources: map[string]toolsets.Feature{}, templates: map[string]toolsets.Feature{},
		prompts: map[string]toolsets.Feature{}, matchers: map[string]*regexp.Regexp{}}
	defs := map[string]any{}
	listed := map[string]*connector.Features{}
	var origins []toolsets.FeatureOrigin
	for _, sel := range usable {
		f, err := s.origin(sel.Name).listFeatures(ctx, s)
		if err != nil {
			s.g.log.V(1).Info("Could not list an origin's resources and prompts", "toolset", s.key.String(), "server", sel.Name, "reason", err.Error())
			continue
		}
		listed[sel.Name] = f
		fo := toolsets.FeatureOrigin{Server: sel.Name, Prefix: sel.Prefix}
		for _, r := range f.Resources {
			if _, err := url.Parse(r.URI); err == nil {
				fo.Resources = append(fo.Resources, r.URI)
			}
		}
		for _, t := range f.Templates {
			if _, err := uritemplate.New(t.URITemplate); err == nil {
				fo.Templates = append(fo.Templates, t.URITemplate)
			}
		}
		for _, p := range f.Prompts {
			fo.Prompts = append(fo.Prompts, p.Name)
		}
		origins = append(origins, fo)
	}
	// Each origin's definitions by its own URI, template and name.
	resources := map[string]map[string]*mcp.Resource{}
	templates := map[string]map[string]*mcp.ResourceTemplate{}
	prompts := map[string]map[string]*mcp.Prompt{}
	for server, f := range listed {
		resources[server], templates[server], prompts[server] = map[string]*mcp.Resource{}, map[string]*mcp.ResourceTemplate{}, map[string]*mcp.Prompt{}
		for _, r := range f.Resources {
			resources[server][r.URI] = r
		}
		for _, t := range f.Templates {
			templates[server][t.URITemplate] = t
		}
		for _, p := range f.Prompts {
			prompts[server][p.Name] = p
		}
	}
	exp := toolsets.ExposeFeatures(ts, origins)
	for _, e := range exp.Resources {
		if r := resources[e.Server][e.Original]; r != nil {
			def := *r
			def.URI = e.Name
			defs["resource\x00"+e.Name] = &def
			routes.resources[e.Name] = e
		}
	}
	for _, e := range exp.Templates {
		if t := templates[e.Server][e.Original]; t != nil {
			def := *t
			def.URITemplate = e.Name
			// Checked again: a wrapped template must still parse, or go-sdk panics.
			if parsed, err := uritemplate.New(def.URITemplate); err == nil {
				defs["template\x00"+e.Name] = &def
				routes.templates[e.Name] = e
				routes.matchers[e.Name] = parsed.Regexp()
			}
		}
	}
	for _, e := range exp.Prompts {
		if p := prompts[e.Server][e.Original]; p != nil {
			def := *p
			def.Name = e.Name
			defs["prompt\x00"+e.Name] = &def
			routes.prompts[e.Name] = e
		}
	}
	return routes, defs
}

// registerFeatures makes the session's go-sdk server serve defs (from exposeFeatures),
// changing only what changed. go-sdk tells the client of each list's change.
func (s *toolsetSession) registerFeatures(routes featureRoutes, defs map[string]any) {
	s.mu.Lock()
	if s.ending {
		s.mu.Unlock()
		return
	}
	s.features = routes
	var removed []string
	added := map[string]any{}
	for key := range s.registeredFeatures {
		if _, ok := defs[key]; !ok {
			removed = append(removed, key)
			delete(s.registeredFeatures, key)
		}
	}
	for key, def := range defs {
		raw, _ := json.Marshal(def)
		if s.registeredFeatures[key] != string(raw) {
			added[key] = def
			s.registeredFeatures[key] = string(raw)
		}
	}
	// An origin announced a change this client does not see: one served definition of
	// that list is registered again, unchanged, which has go-sdk announce the list.
	for kind, prefixes := range map[string][]string{"resources": {"resource\x00", "template\x00"}, "prompts": {"prompt\x00"}} {
		if !s.announced[kind] {
			continue
		}
		delete(s.announced, kind)
		if slices.ContainsFunc(slices.Collect(maps.Keys(added)), func(k string) bool { return hasAnyPrefix(k, prefixes) }) ||
			slices.ContainsFunc(removed, func(k string) bool { return hasAnyPrefix(k, prefixes) }) {
			continue // the change itself is announced
		}
		for _, key := range slices.Sorted(maps.Keys(defs)) {
			if hasAnyPrefix(key, prefixes) {
				added[key] = defs[key]
				break
			}
		}
	}
	if len(removed) == 0 && len(added) == 0 {
		s.mu.Unlock()
		return
	}
	s.resourceNews.version++
	s.promptNews.version++
	resourceVersion, promptVersion := s.resourceNews.version, s.promptNews.version
	s.mu.Unlock()

	for _, key := range removed {
		kind, name, _ := strings.Cut(key, "\x00")
		switch kind {
		case "resource":
			s.server.RemoveResources(name)
		case "template":
			s.server.RemoveResourceTemplates(name)
		case "prompt":
			s.server.RemovePrompts(name)
		}
	}
	for _, def := range added {
		switch d := def.(type) {
		case *mcp.Resource:
			s.server.AddResource(d, s.readExposed)
		case *mcp.ResourceTemplate:
			s.server.AddResourceTemplate(d, s.readExposed)
		case *mcp.Prompt:
			s.server.AddPrompt(d, s.getExposedPrompt)
		}
	}
	s.mu.Lock()
	s.resourceNews.applied, s.promptNews.applied = resourceVersion, promptVersion
	s.mu.Unlock()
}

// resourceRoute finds the origin of an exposed URI the toolset's spec.resources allows: a
// listed resource, else a template that matches it. The URI is decoded once
// (toolsets.SplitURI); a wrapped URI must name the origin that owns the matching resource
// or template.
func (s *toolsetSession) resourceRoute(exposed string) (origin, uri string, ok bool) {
	server, inner, err := toolsets.SplitURI(exposed)
	if err != nil {
		return "", "", false
	}
	// spec.resources judges the concrete URI too: a template may match what a deny glob
	// names.
	if ts := s.g.toolset(s.key); ts == nil || !toolsets.ResourceAllowed(&ts.Spec, exposed) {
		return "", "", false
	}
	s.mu.Lock()
	routes := s.features
	s.mu.Unlock()
	if r, found := routes.resources[exposed]; found {
		return r.Server, r.Original, true
	}
	for tmpl, r := range routes.templates {
		if bare := r.Name == r.Original; bare != (server == "") || (!bare && r.Server != server) {
			// A bare URI belongs to an origin whose prefix is "", a wrapped one to the
			// origin it names.
			continue
		}
		if routes.matchers[tmpl].MatchString(exposed) {
			return r.Server, inner, true
		}
	}
	return "", "", false
}

// readExposed reads an exposed resource from its origin (resources/read).
func (s *toolsetSession) readExposed(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	exposed := req.Params.URI
	server, uri, ok := s.resourceRoute(exposed)
	if !ok {
		return nil, mcp.ResourceNotFoundError(exposed)
	}
	var res *mcp.ReadResourceResult
	err := s.forward(ctx, req.Session, nil, server, policy.MethodResourcesRead, exposed, uri, func(ctx context.Context, cs *mcp.ClientSession, meta mcp.Meta) error {
		var err error
		up := &mcp.ReadResourceParams{Meta: meta, URI: uri}
		up.InputResponses, up.RequestState = forwardedInputOf(req.Params.InputResponses, req.Params.RequestState)
		res, err = cs.ReadResource(ctx, up)
		return err
	})
	if err != nil {
		return nil, err
	}
	prefix := s.prefixOf(server)
	for _, c := range res.Contents {
		if c != nil {
			c.URI = toolsets.ExposedURI(prefix, server, c.URI)
		}
	}
	return res, nil
}

// getExposedPrompt gets an exposed prompt from its origin (prompts/get).
func (s *toolsetSession) getExposedPrompt(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	s.mu.Lock()
	r, ok := s.features.prompts[req.Params.Name]
	s.mu.Unlock()
	if !ok {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %s", quoteName(req.Params.Name))}
	}
	// The arguments are judged as they are forwarded: go-sdk decoded them once.
	args, err := json.Marshal(req.Params.Arguments)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "the prompt's arguments could not be encoded"}
	}
	if req.Params.Arguments == nil {
		args = nil
	}
	var res *mcp.GetPromptResult
	err = s.forward(ctx, req.Session, args, r.Server, policy.MethodPromptsGet, r.Name, r.Original, func(ctx context.Context, cs *mcp.ClientSession, meta mcp.Meta) error {
		var err error
		up := &mcp.GetPromptParams{Meta: meta, Name: r.Original, Arguments: req.Params.Arguments}
		// A sessionless client's answers to the origin's questions (input_required) go
		// back to the origin, as a tool call's do.
		up.InputResponses, up.RequestState = forwardedInputOf(req.Params.InputResponses, req.Params.RequestState)
		res, err = cs.GetPrompt(ctx, up)
		return err
	})
	if err != nil {
		return nil, err
	}
	prefix := s.prefixOf(r.Server)
	for _, m := range res.Messages {
		if m != nil {
			exposeContentURIs(prefix, r.Server, m.Content)
		}
	}
	return res, nil
}

// complete routes completion/complete by the prompt or resource template it refers to.
func (s *toolsetSession) complete(ctx context.Context, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	if params == nil || params.Ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete needs a ref"}
	}
	// The client's _meta stays with the client (a sessionless client's names its own
	// era); the origin gets the trace context.
	up := mcp.CompleteParams{Meta: tracing.InjectMeta(ctx, nil), Argument: params.Argument, Context: params.Context}
	ref := *params.Ref
	s.mu.Lock()
	routes := s.features
	s.mu.Unlock()
	var server string
	switch ref.Type {
	case "ref/prompt":
		r, ok := routes.prompts[ref.Name]
		if !ok {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown prompt %s", quoteName(ref.Name))}
		}
		server, ref.Name = r.Server, r.Original
	case "ref/resource":
		r, ok := routes.templates[ref.URI]
		if !ok {
			r, ok = routes.resources[ref.URI]
		}
		if !ok {
			return nil, mcp.ResourceNotFoundError(ref.URI)
		}
		server, ref.URI = r.Server, r.Original
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown completion reference type %s", quoteName(ref.Type))}
	}
	up.Ref = &ref
	key := connector.Key{Namespace: s.key.Namespace, Name: server}
	if v := s.g.judge(ctx, &query{caller: s.caller, server: key, toolset: &s.key, method: "completion/complete"}); v.Effect == policy.EffectDeny {
		return nil, &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	cs, err := s.origin(server).open(s)
	if err != nil {
		return nil, toolError(err)
	}
	res, err := cs.Complete(ctx, &up)
	if err != nil {
		return nil, toolError(fmt.Errorf("MCPServer %s: %w", key, err))
	}
	return res, nil
}

// subscribe forwards a subscription to the origin of the exposed URI; go-sdk records it,
// and the origin's notifications/resources/updated reach the subscriber under the
// exposed URI (resourceUpdated).
func (s *toolsetSession) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	exposed := req.Params.URI
	server, uri, ok := s.resourceRoute(exposed)
	if !ok {
		return mcp.ResourceNotFoundError(exposed)
	}
	// The origin must still be one the caller may use: the routes are recomputed
	// only every few seconds.
	key := connector.Key{Namespace: s.key.Namespace, Name: server}
	if v := s.g.judge(ctx, &query{caller: s.caller, server: key, toolset: &s.key, method: "resources/subscribe"}); v.Effect == policy.EffectDeny {
		return &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	o := s.origin(server)
	cs, err := o.open(s)
	if err != nil {
		return toolError(err)
	}
	o.mu.Lock()
	_, subscribed := o.subscriptions[exposed]
	full := len(o.subscriptions) >= maxSubscriptionsPerOrigin
	up := o.up
	o.mu.Unlock()
	switch {
	case subscribed:
		return nil
	case full:
		// Each holds a stream open to the origin (a listen stream in either era).
		return &jsonrpc.Error{Code: codeUnavailable, Message: fmt.Sprintf(
			"this session holds %d resource subscriptions to MCPServer %s already; unsubscribe from one first", maxSubscriptionsPerOrigin, key)}
	}
	var stop func()
	if sessionlessEra(cs) {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			return toolError(fmt.Errorf("MCPServer %s: %w", key, err))
		}
		stop = func() { _ = cs.Unsubscribe(context.WithoutCancel(ctx), &mcp.UnsubscribeParams{URI: uri}) }
	} else {
		// A session-era origin sends its updates outside any request, where the
		// connector's Upstream hears them only on a listen stream of its own.
		stop = up.ListenForResource(uri)
	}
	o.mu.Lock()
	if o.subscriptions == nil {
		o.subscriptions = map[string]func(){}
	}
	if _, raced := o.subscriptions[exposed]; raced {
		o.mu.Unlock()
		stop()
		return nil
	}
	o.subscriptions[exposed] = stop
	o.mu.Unlock()
	return nil
}

// maxSubscriptionsPerOrigin bounds the resource subscriptions one toolset session holds
// with one origin: each holds a stream open to it.
const maxSubscriptionsPerOrigin = 32

// unsubscribe ends the subscription to an exposed URI, whichever origin holds it: found
// by the URI the client subscribed with, so that it ends even if the URI is no longer
// served (spec.resources changed, the origin went away).
func (s *toolsetSession) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	origins := slices.Collect(maps.Values(s.origins))
	s.mu.Unlock()
	for _, o := range origins {
		o.mu.Lock()
		stop := o.subscriptions[req.Params.URI]
		delete(o.subscriptions, req.Params.URI)
		o.mu.Unlock()
		if stop != nil {
			stop()
		}
	}
	return nil
}

// sessionlessEra reports whether cs speaks MCP 2026-07-28 or later with its server.
func sessionlessEra(cs *mcp.ClientSession) bool {
	res := cs.InitializeResult()
	return res != nil && res.ProtocolVersion >= sessionlessVersion
}

// resourceUpdated tells the session's subscribers that an origin's resource changed,
// under its exposed URI.
func (s *toolsetSession) resourceUpdated(o *origin, uri string) {
	exposed := toolsets.ExposedURI(s.prefixOf(o.name), o.name, uri)
	_ = s.server.ResourceUpdated(s.ctx, &mcp.ResourceUpdatedNotificationParams{URI: exposed})
}

// featuresChanged forgets an origin's features after it said its resources or prompts
// changed; the session lists them again.
func (s *toolsetSession) featuresChanged(o *origin, kind string) {
	o.mu.Lock()
	o.features = nil
	o.mu.Unlock()
	s.announce(kind)
	s.resync()
}

// prefixOf is the prefix the toolset gives server's names.
func (s *toolsetSession) prefixOf(server string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prefixes[server]
}

// forward sends one read or prompt request to an origin after the gateway's decision,
// with the origin's rate limit for the caller, a client span and a refusal's audit line.
func (s *toolsetSession) forward(ctx context.Context, ss *mcp.ServerSession, args json.RawMessage, server, method, exposed, name string, send func(context.Context, *mcp.ClientSession, mcp.Meta) error) error {
	start := time.Now()
	key := connector.Key{Namespace: s.key.Namespace, Name: server}
	q := &query{caller: s.caller, server: key, toolset: &s.key, exposed: exposed, method: method, arguments: args,
		log: s.audit, who: []any{"server", server}}
	if method == policy.MethodResourcesRead {
		q.resource = name
	} else {
		q.prompt = name
	}
	q.audit = func(outcome string, kv ...any) {
		s.g.metrics.call(key, method, outcome, time.Since(start))
		s.audit.Info("Request refused", append([]any{"method", method, "name", clip(q.loggedName()), "server", server}, kv...)...)
	}
	if !s.sessionless && ss != nil {
		// A sessionless client cannot be asked: a read that needs approval is refused.
		q.approve = elicitApproval(ss)
	}
	if v := s.g.decide(ctx, q); v.Effect == policy.EffectDeny {
		return &jsonrpc.Error{Code: codeRefused, Message: v.Reason}
	}
	if srv := s.g.server(key); srv != nil {
		if delay := s.g.rateDelay(s.caller, srv, key, 1); delay > 0 {
			return &jsonrpc.Error{Code: codeUnavailable, Message: fmt.Sprintf("more than %d requests per second to MCPServer %s (spec.gateway.requestsPerSecond); retry in %s",
				srv.requestsPerSecond, key, delay.Round(time.Millisecond))}
		}
	}
	cs, err := s.origin(server).open(s)
	if err != nil {
		s.g.metrics.call(key, method, outcomeUpstreamError, time.Since(start))
		return toolError(err)
	}
	ctx, client := startClientSpan(ctx, method, "", key)
	err = send(ctx, cs, tracing.InjectMeta(ctx, nil))
	outcome := outcomeOK
	if err != nil {
		outcome = outcomeUpstreamError
	}
	if client.IsRecording() {
		endSpan(client, outcome)
	}
	s.g.metrics.call(key, method, outcome, time.Since(start))
	if err != nil {
		if rpcErr, ok := errors.AsType[*jsonrpc.Error](err); ok {
			return rpcErr
		}
		return toolError(fmt.Errorf("MCPServer %s: %w", key, err))
	}
	return nil
}

// exposeContentURIs rewrites the URIs of resource links and embedded resources in
// content an origin sent to the toolset's URIs, so that a client reading them reaches
// the same origin.
func exposeContentURIs(prefix, server string, content ...mcp.Content) {
	if prefix == "" {
		return
	}
	for _, c := range content {
		switch c := c.(type) {
		case *mcp.ResourceLink:
			c.URI = toolsets.ExposedURI(prefix, server, c.URI)
		case *mcp.EmbeddedResource:
			if c.Resource != nil {
				c.Resource.URI = toolsets.ExposedURI(prefix, server, c.Resource.URI)
			}
		}
	}
}

// exposeUIMeta rewrites the MCP App resource a tool names in its _meta (SEP-1865:
// _meta.ui.resourceUri, and the earlier flat "ui/resourceUri") to the toolset's URI of
// that resource, so a host fetches the app through the toolset from the right origin.
func exposeUIMeta(prefix, server string, meta mcp.Meta) mcp.Meta {
	if prefix == "" || meta == nil {
		return meta
	}
	out := make(mcp.Meta, len(meta))
	for k, v := range meta {
		out[k] = v
	}
	if uri, ok := out["ui/resourceUri"].(string); ok {
		out["ui/resourceUri"] = toolsets.ExposedURI(prefix, server, uri)
	}
	if ui, ok := out["ui"].(map[string]any); ok {
		if uri, ok := ui["resourceUri"].(string); ok {
			copied := make(map[string]any, len(ui))
			for k, v := range ui {
				copied[k] = v
			}
			copied["resourceUri"] = toolsets.ExposedURI(prefix, server, uri)
			out["ui"] = copied
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}
