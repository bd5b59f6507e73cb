package catalog

import (
	"net/url"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// newServerEntry copies what the catalogue may show of an MCPServer: status fields (the
// endpoint as redacted in status), labels and the spec description. It never reads
// spec.http (url, headers, Secret references), spec.stdio or annotations.
func newServerEntry(obj *mcpv1alpha1.MCPServer) *serverEntry {
	st := &obj.Status
	summary := ServerSummary{
		Namespace:       obj.Namespace,
		Name:            obj.Name,
		Description:     obj.Spec.Description,
		Labels:          copyLabels(obj.Labels),
		Endpoint:        redactEndpoint(st.Endpoint),
		Transport:       string(st.Transport),
		ProtocolVersion: st.ProtocolVersion,
		Ready:           isReady(st.Conditions),
		GatewayPath:     gatewaypath.Server(obj.Namespace, obj.Name),
		ToolCount:       st.ToolCount,
		ToolsTruncated:  st.ToolsTruncated,
	}
	if st.ServerInfo != nil {
		summary.ServerInfo = &ServerInfo{
			Name:    st.ServerInfo.Name,
			Version: st.ServerInfo.Version,
			Title:   st.ServerInfo.Title,
		}
	}
	detail := &ServerDetail{ServerSummary: summary}
	if c := st.Capabilities; c != nil {
		detail.Capabilities = &Capabilities{
			Tools:       c.Tools,
			Resources:   c.Resources,
			Prompts:     c.Prompts,
			ListChanged: c.ListChanged,
		}
	}
	if len(st.Conditions) > 0 {
		detail.Conditions = make([]Condition, 0, len(st.Conditions))
	}
	for i := range st.Conditions {
		c := &st.Conditions[i]
		cond := Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: conditionMessage(c.Reason)}
		if !c.LastTransitionTime.IsZero() {
			cond.LastTransitionTime = c.LastTransitionTime.UTC().Format(time.RFC3339)
		}
		detail.Conditions = append(detail.Conditions, cond)
	}
	if len(st.Tools) > 0 {
		detail.Tools = make([]Tool, 0, len(st.Tools))
	}
	for i := range st.Tools {
		t := &st.Tools[i]
		if t.Name == "" {
			continue
		}
		detail.Tools = append(detail.Tools, Tool{
			Name:            t.Name,
			Title:           t.Title,
			Description:     t.Description,
			ReadOnlyHint:    sharedBool(t.ReadOnlyHint),
			DestructiveHint: sharedBool(t.DestructiveHint),
			IdempotentHint:  sharedBool(t.IdempotentHint),
			OpenWorldHint:   sharedBool(t.OpenWorldHint),
		})
	}
	detail.Tools = sortedDistinctTools(detail.Tools)
	e := &serverEntry{key: serverKey{namespace: obj.Namespace, name: obj.Name}, detail: detail}
	e.tools = newToolEntries(e, detail.Tools)
	return e
}

// conditionMessages are the messages the catalogue shows for each condition reason. The
// controller's own messages are written for the MCPServer's owner and name Secrets,
// keys, addresses and policies; the catalogue's callers get a fixed sentence per reason
// instead, and the reason itself.
var conditionMessages = map[string]string{
	mcpv1alpha1.ReasonSucceeded:           "The condition holds.",
	mcpv1alpha1.ReasonProgressing:         "The operator is working on the latest change to the server.",
	mcpv1alpha1.ReasonConnecting:          "The operator is connecting to the server.",
	mcpv1alpha1.ReasonSuspended:           "The server is suspended.",
	mcpv1alpha1.ReasonInvalidSpec:         "The server's specification cannot be acted on.",
	mcpv1alpha1.ReasonSecretNotFound:      "A Secret or Secret key the server's specification references is missing.",
	mcpv1alpha1.ReasonEgressDenied:        "An egress policy denies the connection to the server.",
	mcpv1alpha1.ReasonRedirectDenied:      "The server redirected to a destination the redirect policy does not allow.",
	mcpv1alpha1.ReasonDNSFailure:          "The server's host name does not resolve.",
	mcpv1alpha1.ReasonConnectionRefused:   "The server refused the connection.",
	mcpv1alpha1.ReasonTLSError:            "The TLS handshake with the server failed.",
	mcpv1alpha1.ReasonUnauthorized:        "The server rejected the operator's credentials.",
	mcpv1alpha1.ReasonNotFound:            "The server's endpoint was not found.",
	mcpv1alpha1.ReasonProtocolError:       "The server does not speak MCP as expected.",
	mcpv1alpha1.ReasonTimeout:             "The server did not answer in time.",
	mcpv1alpha1.ReasonLimitExceeded:       "The server sent more than the operator accepts.",
	mcpv1alpha1.ReasonWorkloadUnavailable: "The server's workload has no available replica.",
	mcpv1alpha1.ReasonSessionEnded:        "The server ended the session; the operator is reconnecting.",
	mcpv1alpha1.ReasonToolsChanged:        "The server's tools differ from the reviewed ones; the gateway refuses tool calls until they are reviewed again.",
	mcpv1alpha1.ReasonToolsMatchPinned:    "The server's tools are the reviewed ones.",
}

// conditionMessage returns the catalogue's message for a condition reason, never the
// condition's own message.
func conditionMessage(reason string) string {
	if m, ok := conditionMessages[reason]; ok {
		return m
	}
	return "See the MCPServer's status conditions for details."
}

// redactEndpoint returns the endpoint without user information, query string or
// fragment. Status already carries it that way; this keeps a secret out of the catalogue
// even if a writer of status did not. An endpoint that does not parse is dropped.
func redactEndpoint(endpoint string) string {
	if endpoint == "" {
		return ""
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	if redacted := u.String(); redacted != endpoint {
		return redacted
	}
	return endpoint // share status' bytes rather than keep a copy of them
}

func isReady(conds []metav1.Condition) bool {
	for i := range conds {
		if conds[i].Type == mcpv1alpha1.ConditionReady {
			return conds[i].Status == metav1.ConditionTrue
		}
	}
	return false
}

func copyLabels(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// trueHint and falseHint are what every tool hint points at: entries are immutable, and
// a copy per hint would be an allocation for each hint of every tool of every server.
var trueHint, falseHint = true, false

// sharedBool returns a pointer to trueHint or falseHint with the value of b, or nil.
func sharedBool(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case *b:
		return &trueHint
	default:
		return &falseHint
	}
}
