package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// A condition's expected state in a table row: "True/Succeeded", "False/SecretNotFound",
// or absent.
const absent = ""

func cond(obj *mcpv1alpha1.MCPServer, condType string) string {
	c := meta.FindStatusCondition(obj.Status.Conditions, condType)
	if c == nil {
		return absent
	}
	return string(c.Status) + "/" + c.Reason
}

func httpObject() *mcpv1alpha1.MCPServer {
	return &mcpv1alpha1.MCPServer{
		TypeMeta:   metav1.TypeMeta{APIVersion: mcpv1alpha1.GroupVersion.String(), Kind: "MCPServer"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "srv", Generation: 1},
		Spec: mcpv1alpha1.MCPServerSpec{
			HTTP: &mcpv1alpha1.HTTPServerSpec{URL: "https://mcp.example.com/mcp?token=secret"},
		},
	}
}

// oauthObject is an http server with OAuth client credentials.
func oauthObject() *mcpv1alpha1.MCPServer {
	obj := httpObject()
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{ClientCredentials: &mcpv1alpha1.OAuth2ClientCredentials{
		ClientID:     "c",
		ClientSecret: &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "vendor-oauth", Key: "secret"}},
	}}}
	return obj
}

func stdioObject() *mcpv1alpha1.MCPServer {
	obj := httpObject()
	obj.Spec.HTTP = nil
	obj.Spec.Stdio = &mcpv1alpha1.StdioServerSpec{Image: "example/server:1", Command: []string{"server"}}
	return obj
}

// withConditions returns obj with the conditions of an earlier reconcile, observed at
// generation 1.
func withConditions(obj *mcpv1alpha1.MCPServer, conds ...metav1.Condition) *mcpv1alpha1.MCPServer {
	for _, c := range conds {
		c.ObservedGeneration = 1
		if c.Message == "" {
			c.Message = "earlier"
		}
		meta.SetStatusCondition(&obj.Status.Conditions, c)
	}
	return obj
}

func condition(condType string, st metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: condType, Status: st, Reason: reason}
}

// readyBefore are the conditions of a server that was Ready.
var readyBefore = []metav1.Condition{
	condition(mcpv1alpha1.ConditionReady, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded),
	condition(mcpv1alpha1.ConditionConnected, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded),
	condition(mcpv1alpha1.ConditionToolsDiscovered, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded),
	condition(mcpv1alpha1.ConditionEgressAllowed, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded),
}

func readySession(endpoint string) *connector.Snapshot {
	return &connector.Snapshot{
		State:           connector.StateReady,
		Endpoint:        endpoint,
		Transport:       connector.TransportStreamableHTTP,
		ProtocolVersion: "2025-11-25",
		ServerInfo:      connector.ServerInfo{Name: "srv", Version: "1"},
		Capabilities:    connector.Capabilities{Tools: true},
		Discovered:      true,
		Tools:           []connector.Tool{{Name: "search"}, {Name: "delete_all"}},
		ToolsDigest:     "sha256:abc",
	}
}

func downSession(e *connector.Error) *connector.Snapshot {
	return &connector.Snapshot{State: connector.StateDown, Endpoint: "https://mcp.example.com:443/mcp", LastError: e, ConsecutiveFailures: 1}
}

func connectingSession() *connector.Snapshot {
	return &connector.Snapshot{State: connector.StateConnecting, Endpoint: "https://mcp.example.com:443/mcp"}
}

const allowed = "Egress to https://mcp.example.com:443/mcp is allowed by the default egress posture"

// readyDigest is the status.toolsDigest readySession publishes without a filter.
var readyDigest = connector.ToolsDigest(readySession("").Tools)

// otherDigest is a well-formed digest of some other set of tools.
const otherDigest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"

// pinned returns obj with spec.tools.pinnedDigest set to digest.
func pinned(obj *mcpv1alpha1.MCPServer, digest string) *mcpv1alpha1.MCPServer {
	obj.Spec.Tools = &mcpv1alpha1.ToolFilter{PinnedDigest: digest}
	return obj
}

// TestComputeStatus covers every entry of the readiness chain and the conditions each
// observation leads to, including the kstatus verdict a GitOps tool would reach.
func TestComputeStatus(t *testing.T) {
	bridge := "http://mcp-srv.ns.svc:8080/mcp"
	cases := []struct {
		name string
		obj  *mcpv1alpha1.MCPServer
		obs  observation
		// want maps condition types to "Status/Reason", or absent.
		want    map[string]string
		kstatus status.Status
		check   func(t *testing.T, obj *mcpv1alpha1.MCPServer)
	}{
		{
			name: "ready http server",
			obj:  httpObject(),
			obs:  observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "True/Succeeded",
				mcpv1alpha1.ConditionConnected:         "True/Succeeded",
				mcpv1alpha1.ConditionToolsDiscovered:   "True/Succeeded",
				mcpv1alpha1.ConditionEgressAllowed:     "True/Succeeded",
				mcpv1alpha1.ConditionWorkloadAvailable: absent,
				mcpv1alpha1.ConditionReconciling:       absent,
				mcpv1alpha1.ConditionStalled:           absent,
			},
			kstatus: status.CurrentStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				st := obj.Status
				if st.Transport != mcpv1alpha1.TransportStreamableHTTP || st.Endpoint != "https://mcp.example.com:443/mcp" {
					t.Errorf("transport %q endpoint %q", st.Transport, st.Endpoint)
				}
				if st.ToolCount != 2 || len(st.Tools) != 2 || st.ToolsDigest == "" || st.ServerInfo.Name != "srv" {
					t.Errorf("tools not published: %+v", st)
				}
				if st.ObservedGeneration != 1 {
					t.Errorf("observedGeneration = %d", st.ObservedGeneration)
				}
			},
		},
		{
			name: "suspended",
			obj:  withConditions(func() *mcpv1alpha1.MCPServer { o := httpObject(); o.Spec.Suspend = true; return o }(), readyBefore...),
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/Suspended",
				mcpv1alpha1.ConditionConnected:       "False/Suspended",
				mcpv1alpha1.ConditionToolsDiscovered: "False/Suspended",
				mcpv1alpha1.ConditionEgressAllowed:   "Unknown/Suspended",
				mcpv1alpha1.ConditionReconciling:     absent,
				mcpv1alpha1.ConditionStalled:         absent,
			},
			// Neither Reconciling nor Stalled: kstatus goes by Ready=False alone.
			kstatus: status.InProgressStatus,
		},
		{
			name: "suspended stdio server whose workload was removed",
			obj: withConditions(func() *mcpv1alpha1.MCPServer { o := stdioObject(); o.Spec.Suspend = true; return o }(),
				append(readyBefore, condition(mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded))...),
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/Suspended",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/Suspended",
				mcpv1alpha1.ConditionReconciling:       absent,
				mcpv1alpha1.ConditionStalled:           absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			// Defect: summarize found no EgressAllowed and overwrote InvalidSpec with
			// Progressing and Reconciling=True: in progress forever.
			name: "stdio server on a manager without a stdio runtime",
			obj:  stdioObject(),
			obs:  observation{invalidSpec: "This manager runs no stdio runtime"},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/InvalidSpec",
				mcpv1alpha1.ConditionConnected:         "False/InvalidSpec",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/InvalidSpec",
				mcpv1alpha1.ConditionStalled:           "True/InvalidSpec",
				mcpv1alpha1.ConditionReconciling:       absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "missing Secret",
			obj:  withConditions(httpObject(), readyBefore...),
			obs:  observation{missingSecret: &missingSecretError{secret: "api-token", key: "token"}},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/SecretNotFound",
				mcpv1alpha1.ConditionConnected:       "False/SecretNotFound",
				mcpv1alpha1.ConditionToolsDiscovered: "False/SecretNotFound",
				mcpv1alpha1.ConditionStalled:         "True/SecretNotFound",
				mcpv1alpha1.ConditionReconciling:     absent,
			},
			kstatus: status.FailedStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				if msg := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady).Message; msg != `Secret "api-token" not found` {
					t.Errorf("Ready message %q", msg)
				}
			},
		},
		{
			name: "egress denied",
			obj:  httpObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonEgressDenied, Message: "connection to mcp.example.com port 443 denied: policy ns/lockdown",
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "False/EgressDenied",
				mcpv1alpha1.ConditionEgressAllowed: "False/EgressDenied",
				mcpv1alpha1.ConditionConnected:     "False/EgressDenied",
				mcpv1alpha1.ConditionStalled:       "True/EgressDenied",
				mcpv1alpha1.ConditionReconciling:   absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "stdio workload not yet available",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload:        &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Message: "Deployment mcp-srv has no available replica"}},
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/WorkloadUnavailable",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/WorkloadUnavailable",
				mcpv1alpha1.ConditionEgressAllowed:     "True/Succeeded",
				mcpv1alpha1.ConditionConnected:         "False/WorkloadUnavailable",
				mcpv1alpha1.ConditionReconciling:       "True/WorkloadUnavailable",
				mcpv1alpha1.ConditionStalled:           absent,
			},
			kstatus: status.InProgressStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				if obj.Status.Transport != mcpv1alpha1.TransportStdio || obj.Status.Endpoint != bridge {
					t.Errorf("transport %q endpoint %q", obj.Status.Transport, obj.Status.Endpoint)
				}
			},
		},
		{
			name: "stdio server whose container keeps exiting",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload: &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Reason: mcpv1alpha1.ReasonServerExited,
					Message: "Pod mcp-srv-1-a: container server exited with code 1 (Error), restarted 3 times; last log lines: boom"}},
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/ServerExited",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/ServerExited",
				mcpv1alpha1.ConditionConnected:         "False/ServerExited",
				mcpv1alpha1.ConditionToolsDiscovered:   "False/ServerExited",
				mcpv1alpha1.ConditionReconciling:       "True/ServerExited",
				mcpv1alpha1.ConditionStalled:           absent,
			},
			kstatus: status.InProgressStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				ready := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
				if want := "Pod mcp-srv-1-a: container server exited with code 1 (Error), restarted 3 times; last log lines: boom"; ready.Message != want {
					t.Errorf("Ready message %q, want the pod's own %q", ready.Message, want)
				}
			},
		},
		{
			name: "stdio workload cannot be applied",
			obj:  stdioObject(),
			obs:  observation{workload: &workloadObservation{err: errors.New("applying Deployment mcp-srv: conflict")}},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/WorkloadUnavailable",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/WorkloadUnavailable",
				mcpv1alpha1.ConditionReconciling:       "True/WorkloadUnavailable",
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "stdio server connected through its bridge",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload:        &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Available: true, Message: "Deployment mcp-srv has 1 available replica(s)"}},
				session:         readySession(bridge),
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "True/Succeeded",
				mcpv1alpha1.ConditionWorkloadAvailable: "True/Succeeded",
				mcpv1alpha1.ConditionConnected:         "True/Succeeded",
			},
			kstatus: status.CurrentStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				if obj.Status.Transport != mcpv1alpha1.TransportStdio {
					t.Errorf("a stdio server is reached over %q", obj.Status.Transport)
				}
			},
		},
		{
			name: "stdio server whose new version cannot run keeps serving the previous one",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload: &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Available: true,
					Message: "Deployment mcp-srv has 1 available replica(s); its current pod template has not rolled out",
					Rollout: &Rollout{Reason: mcpv1alpha1.ReasonImagePullFailed,
						Message: `Pod mcp-srv-2-a: container server cannot pull image "example/server:2": ErrImagePull: not found`}}},
				session: readySession(bridge),
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "True/Succeeded",
				mcpv1alpha1.ConditionWorkloadAvailable: "True/Succeeded",
				mcpv1alpha1.ConditionConnected:         "True/Succeeded",
				mcpv1alpha1.ConditionReconciling:       "True/ImagePullFailed",
				mcpv1alpha1.ConditionStalled:           absent,
			},
			kstatus: status.InProgressStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				want := `previous version keeps serving; the new one cannot run: Pod mcp-srv-2-a: container server cannot pull image "example/server:2": ErrImagePull: not found`
				ready := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReady)
				if ready.Message != "Connected and tools discovered; the "+want {
					t.Errorf("Ready message %q", ready.Message)
				}
				rec := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReconciling)
				if rec.Message != "The "+want {
					t.Errorf("Reconciling message %q", rec.Message)
				}
			},
		},
		{
			name: "stdio server whose new version is on its way",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload: &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Available: true,
					Message: "Deployment mcp-srv has 1 available replica(s); its current pod template has not rolled out",
					Rollout: &Rollout{Reason: mcpv1alpha1.ReasonRollingOut, Message: "Pod mcp-srv-2-a is pending"}}},
				session: readySession(bridge),
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "True/Succeeded",
				mcpv1alpha1.ConditionReconciling: "True/RollingOut",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.InProgressStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				rec := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionReconciling)
				if want := "The previous version keeps serving while the new one rolls out: Pod mcp-srv-2-a is pending"; rec.Message != want {
					t.Errorf("Reconciling message %q, want %q", rec.Message, want)
				}
			},
		},
		{
			name: "stdio server whose new version is past its progress deadline",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload: &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Available: true, ProgressDeadlineExceeded: true,
					Message: "Deployment mcp-srv has 1 available replica(s); its current pod template has not rolled out",
					Rollout: &Rollout{Reason: mcpv1alpha1.ReasonServerExited,
						Message: "Pod mcp-srv-2-a: container server exited with code 1 (Error), restarted 9 times; Deployment mcp-srv made no progress for 600s (ProgressDeadlineExceeded)"}}},
				session: readySession(bridge),
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "True/Succeeded",
				mcpv1alpha1.ConditionWorkloadAvailable: "True/Succeeded",
				mcpv1alpha1.ConditionStalled:           "True/ServerExited",
				mcpv1alpha1.ConditionReconciling:       absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "stdio server that never ran, past its progress deadline",
			obj:  stdioObject(),
			obs: observation{
				egressAllowedBy: "The server pod's egress is governed by the default egress posture",
				workload: &workloadObservation{status: WorkloadStatus{Endpoint: bridge, Reason: mcpv1alpha1.ReasonImagePullFailed, ProgressDeadlineExceeded: true,
					Message: `Pod mcp-srv-1-a: container server cannot pull image "example/server:1": ImagePullBackOff; Deployment mcp-srv made no progress for 600s (ProgressDeadlineExceeded)`}},
			},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "False/ImagePullFailed",
				mcpv1alpha1.ConditionWorkloadAvailable: "False/ImagePullFailed",
				mcpv1alpha1.ConditionStalled:           "True/ImagePullFailed",
				mcpv1alpha1.ConditionReconciling:       absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "first connect under way",
			obj:  httpObject(),
			obs:  observation{egressAllowedBy: allowed, session: connectingSession()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/Connecting",
				mcpv1alpha1.ConditionConnected:       "Unknown/Connecting",
				mcpv1alpha1.ConditionToolsDiscovered: "Unknown/Connecting",
				mcpv1alpha1.ConditionReconciling:     "True/Connecting",
				mcpv1alpha1.ConditionStalled:         absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "connection refused heals by itself",
			obj:  httpObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonConnectionRefused, Message: "connection refused", Transient: true,
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/ConnectionRefused",
				mcpv1alpha1.ConditionConnected:   "False/ConnectionRefused",
				mcpv1alpha1.ConditionReconciling: "True/ConnectionRefused",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "rejected credential needs a person",
			obj:  httpObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonUnauthorized, Message: "server answered 401 Unauthorized",
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/Unauthorized",
				mcpv1alpha1.ConditionStalled:     "True/Unauthorized",
				mcpv1alpha1.ConditionReconciling: absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			// Defect: a clean end was ProtocolError, not in transientReasons: Stalled
			// flashed before the reconnect.
			name: "session the server ended cleanly",
			obj:  withConditions(httpObject(), readyBefore...),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonSessionEnded, Message: "server ended the session", Transient: true,
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/SessionEnded",
				mcpv1alpha1.ConditionConnected:       "False/SessionEnded",
				mcpv1alpha1.ConditionToolsDiscovered: "True/Succeeded",
				mcpv1alpha1.ConditionReconciling:     "True/SessionEnded",
				mcpv1alpha1.ConditionStalled:         absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			// Defect: WorkloadAvailable stayed, and Ready with it.
			name: "stdio server switched to http",
			obj: func() *mcpv1alpha1.MCPServer {
				o := withConditions(httpObject(),
					condition(mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable),
					condition(mcpv1alpha1.ConditionReady, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable))
				o.Generation = 2
				o.Status.Transport, o.Status.Endpoint = mcpv1alpha1.TransportStdio, bridge
				return o
			}(),
			obs: observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:             "True/Succeeded",
				mcpv1alpha1.ConditionWorkloadAvailable: absent,
				mcpv1alpha1.ConditionReconciling:       absent,
			},
			kstatus: status.CurrentStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				if obj.Status.Transport != mcpv1alpha1.TransportStreamableHTTP || obj.Status.Endpoint != "https://mcp.example.com:443/mcp" {
					t.Errorf("transport %q endpoint %q", obj.Status.Transport, obj.Status.Endpoint)
				}
			},
		},
		{
			name: "restarted manager setting up a Ready server again",
			obj:  withConditions(httpObject(), readyBefore...),
			obs:  observation{egressAllowedBy: allowed, session: connectingSession()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "True/Succeeded",
				mcpv1alpha1.ConditionConnected:       "True/Succeeded",
				mcpv1alpha1.ConditionToolsDiscovered: "True/Succeeded",
				mcpv1alpha1.ConditionReconciling:     absent,
			},
			kstatus: status.CurrentStatus,
		},
		{
			name: "new generation connecting",
			obj: func() *mcpv1alpha1.MCPServer {
				o := withConditions(httpObject(), readyBefore...)
				o.Generation = 2
				return o
			}(),
			obs: observation{egressAllowedBy: allowed, session: connectingSession()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/Connecting",
				mcpv1alpha1.ConditionConnected:   "Unknown/Connecting",
				mcpv1alpha1.ConditionReconciling: "True/Connecting",
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "Secret created, first connect under way",
			obj: withConditions(httpObject(),
				condition(mcpv1alpha1.ConditionConnected, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound),
				condition(mcpv1alpha1.ConditionToolsDiscovered, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound),
				condition(mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, mcpv1alpha1.ReasonSecretNotFound)),
			obs: observation{egressAllowedBy: allowed, session: connectingSession()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/Connecting",
				mcpv1alpha1.ConditionConnected:   "Unknown/Connecting",
				mcpv1alpha1.ConditionReconciling: "True/Connecting",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "probe failing below the threshold",
			obj:  withConditions(httpObject(), readyBefore...),
			obs: observation{egressAllowedBy: allowed, session: func() *connector.Snapshot {
				s := readySession("https://mcp.example.com:443/mcp")
				s.LastError = &connector.Error{Reason: mcpv1alpha1.ReasonTimeout, Message: "server did not answer in time", Transient: true}
				s.ConsecutiveFailures = 1
				return s
			}()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "True/Succeeded",
				mcpv1alpha1.ConditionEgressAllowed: "True/Succeeded",
			},
			kstatus: status.CurrentStatus,
		},
		{
			name: "discovery over the limit",
			obj:  httpObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonLimitExceeded, Message: "server listed more than 10000 tools",
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/LimitExceeded",
				mcpv1alpha1.ConditionToolsDiscovered: "False/LimitExceeded",
				mcpv1alpha1.ConditionStalled:         "True/LimitExceeded",
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "tools match the pinned digest",
			obj:  pinned(httpObject(), readyDigest),
			obs:  observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "True/Succeeded",
				mcpv1alpha1.ConditionToolsPinned: "True/ToolsMatchPinned",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.CurrentStatus,
		},
		{
			name: "tools differ from the pinned digest",
			obj:  pinned(withConditions(httpObject(), readyBefore...), otherDigest),
			obs:  observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:           "False/ToolsChanged",
				mcpv1alpha1.ConditionToolsPinned:     "False/ToolsChanged",
				mcpv1alpha1.ConditionConnected:       "True/Succeeded",
				mcpv1alpha1.ConditionToolsDiscovered: "True/Succeeded",
				mcpv1alpha1.ConditionStalled:         "True/ToolsChanged",
				mcpv1alpha1.ConditionReconciling:     absent,
			},
			// A person has to review the tools and pin again.
			kstatus: status.FailedStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				msg := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionToolsPinned).Message
				if !strings.Contains(msg, readyDigest) || !strings.Contains(msg, otherDigest) {
					t.Errorf("ToolsPinned message %q must name the published and the pinned digest", msg)
				}
			},
		},
		{
			name: "pin removed",
			obj: withConditions(httpObject(), append(readyBefore,
				condition(mcpv1alpha1.ConditionToolsPinned, metav1.ConditionFalse, mcpv1alpha1.ReasonToolsChanged))...),
			obs: observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "True/Succeeded",
				mcpv1alpha1.ConditionToolsPinned: absent,
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.CurrentStatus,
		},
		{
			// The published tools stay while the server is away, and so does the verdict
			// on them; Ready says why the server is away.
			name: "pinned server whose connection dropped",
			obj: func() *mcpv1alpha1.MCPServer {
				o := pinned(withConditions(httpObject(), readyBefore...), readyDigest)
				o.Status.ToolsDigest = readyDigest
				return o
			}(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonConnectionRefused, Message: "connection refused", Transient: true,
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/ConnectionRefused",
				mcpv1alpha1.ConditionToolsPinned: "True/ToolsMatchPinned",
				mcpv1alpha1.ConditionReconciling: "True/ConnectionRefused",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "pinned server not yet discovered",
			obj:  pinned(httpObject(), readyDigest),
			obs:  observation{egressAllowedBy: allowed, session: connectingSession()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:       "False/Connecting",
				mcpv1alpha1.ConditionToolsPinned: "Unknown/Progressing",
				mcpv1alpha1.ConditionReconciling: "True/Connecting",
				mcpv1alpha1.ConditionStalled:     absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "oauth server authenticated",
			obj:  oauthObject(),
			obs: observation{egressAllowedBy: allowed, session: func() *connector.Snapshot {
				s := readySession("https://mcp.example.com:443/mcp")
				s.TokenEndpoint = "https://auth.example.com:443"
				return s
			}()},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "True/Succeeded",
				mcpv1alpha1.ConditionAuthenticated: "True/Succeeded",
			},
			kstatus: status.CurrentStatus,
			check: func(t *testing.T, obj *mcpv1alpha1.MCPServer) {
				if c := meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionAuthenticated); !strings.Contains(c.Message, "https://auth.example.com:443") {
					t.Errorf("Authenticated message %q does not name the token endpoint", c.Message)
				}
			},
		},
		{
			name: "oauth client rejected needs a person",
			obj:  oauthObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonInvalidClient, Authentication: mcpv1alpha1.ReasonInvalidClient,
				Message: "token endpoint https://auth.example.com:443 rejected client \"c\": answered 401 invalid_client",
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "False/InvalidClient",
				mcpv1alpha1.ConditionAuthenticated: "False/InvalidClient",
				mcpv1alpha1.ConditionConnected:     "False/InvalidClient",
				mcpv1alpha1.ConditionStalled:       "True/InvalidClient",
				mcpv1alpha1.ConditionReconciling:   absent,
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "oauth token endpoint denied by egress is EgressDenied first",
			obj:  oauthObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonEgressDenied, Authentication: mcpv1alpha1.ReasonTokenRequestFailed,
				Message: "token request to https://auth.other:443: connection to auth.other denied",
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "False/EgressDenied",
				mcpv1alpha1.ConditionEgressAllowed: "False/EgressDenied",
				mcpv1alpha1.ConditionAuthenticated: "False/TokenRequestFailed",
				mcpv1alpha1.ConditionStalled:       "True/EgressDenied",
			},
			kstatus: status.FailedStatus,
		},
		{
			name: "oauth token endpoint unavailable heals by itself",
			obj:  oauthObject(),
			obs: observation{egressAllowedBy: allowed, session: downSession(&connector.Error{
				Reason: mcpv1alpha1.ReasonTokenRequestFailed, Authentication: mcpv1alpha1.ReasonTokenRequestFailed,
				Message: "token endpoint https://auth.example.com:443 answered 503", Transient: true,
			})},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "False/TokenRequestFailed",
				mcpv1alpha1.ConditionAuthenticated: "False/TokenRequestFailed",
				mcpv1alpha1.ConditionReconciling:   "True/TokenRequestFailed",
				mcpv1alpha1.ConditionStalled:       absent,
			},
			kstatus: status.InProgressStatus,
		},
		{
			name: "oauth server with a missing Secret is not authenticated yet",
			obj:  oauthObject(),
			obs:  observation{missingSecret: &missingSecretError{secret: "vendor-oauth", key: "secret"}},
			want: map[string]string{
				mcpv1alpha1.ConditionReady:         "False/SecretNotFound",
				mcpv1alpha1.ConditionAuthenticated: "Unknown/SecretNotFound",
			},
			kstatus: status.FailedStatus,
		},
		{
			name:    "server without auth carries no Authenticated",
			obj:     httpObject(),
			obs:     observation{egressAllowedBy: allowed, session: readySession("https://mcp.example.com:443/mcp")},
			want:    map[string]string{mcpv1alpha1.ConditionAuthenticated: absent},
			kstatus: status.CurrentStatus,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj.DeepCopy()
			computeStatus(obj, &tc.obs)
			for condType, want := range tc.want {
				if got := cond(obj, condType); got != want {
					t.Errorf("%s = %q, want %q", condType, got, want)
				}
			}
			if got := testutil.KStatus(t, obj); got != tc.kstatus {
				t.Errorf("kstatus = %s, want %s; conditions %+v", got, tc.kstatus, obj.Status.Conditions)
			}
			if tc.check != nil {
				tc.check(t, obj)
			}
			// The same observation again writes nothing: status is a function of it.
			again := obj.DeepCopy()
			computeStatus(again, &tc.obs)
			if !equality.Semantic.DeepEqual(obj.Status, again.Status) {
				t.Errorf("a second reconcile with the same observation changes status:\n%+v\n%+v", obj.Status, again.Status)
			}
		})
	}
}

// TestReadyChainOrder checks that the first failing check is Ready's reason when
// several fail at once.
func TestReadyChainOrder(t *testing.T) {
	obj := stdioObject()
	obj.Spec.Suspend = true
	obs := observation{invalidSpec: "no runtime", missingSecret: errors.New("secret \"x\" not found")}
	computeStatus(obj, &obs)
	if got := cond(obj, mcpv1alpha1.ConditionReady); got != "False/Suspended" {
		t.Errorf("Ready = %q, want the first check, Suspended", got)
	}
	obj.Spec.Suspend = false
	computeStatus(obj, &obs)
	if got := cond(obj, mcpv1alpha1.ConditionReady); got != "False/InvalidSpec" {
		t.Errorf("Ready = %q, want the next check, InvalidSpec", got)
	}
	obs.invalidSpec = ""
	computeStatus(obj, &obs)
	if got := cond(obj, mcpv1alpha1.ConditionReady); got != "False/SecretNotFound" {
		t.Errorf("Ready = %q, want the next check, SecretNotFound", got)
	}
}

func TestStatusNeverCarriesTheQueryString(t *testing.T) {
	obj := httpObject()
	computeStatus(obj, &observation{missingSecret: errors.New("secret \"x\" not found")})
	if obj.Status.Endpoint != "https://mcp.example.com:443/mcp" {
		t.Errorf("endpoint %q", obj.Status.Endpoint)
	}
}
