//go:build node && linux

package node

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// testPodsThatCannotRun gives stdio servers pods the kubelet or admission cannot run: the
// server's Ready condition names what they reported, an Event says it, and the server
// recovers by itself once its manifest is fixed.
func testPodsThatCannotRun(t *testing.T) {
	const namespace = "cannot-run"
	kubectlApply(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {pod-security.kubernetes.io/enforce: restricted}}\n", namespace))
	everything, hello, root := imageNamed(t, "server-everything"), imageNamed(t, "go-sdk-hello"), imageNamed(t, "go-sdk-hello-root")
	node := everything.Command[0]
	nonRoot := "securityContext: {runAsNonRoot: true}"

	for _, tt := range []struct {
		name, server  string
		broken, fixed string // the stdio block's fields
		reason        string
		message       []string // what the message names
	}{{
		name: "an image that is not there", server: "no-image",
		broken:  fmt.Sprintf("image: switchboard.local/not-there:1\n    command: [/server]\n    %s", nonRoot),
		fixed:   fmt.Sprintf("image: %s\n    command: %s\n    %s", hello.Ref, yamlList(hello.Command), nonRoot),
		reason:  mcpv1alpha1.ReasonImagePullFailed,
		message: []string{"switchboard.local/not-there:1"},
	}, {
		name: "a command the image lacks", server: "no-command",
		broken:  fmt.Sprintf("image: %s\n    command: [/usr/local/bin/not-a-server]\n    %s", hello.Ref, nonRoot),
		fixed:   fmt.Sprintf("image: %s\n    command: %s\n    %s", hello.Ref, yamlList(hello.Command), nonRoot),
		reason:  mcpv1alpha1.ReasonServerExited,
		message: []string{"exited with code", "/usr/local/bin/not-a-server", "no such file or directory"},
	}, {
		name: "a server that exits at once", server: "exits-at-once",
		broken:  fmt.Sprintf("image: %s\n    command: [%s, -e, \"console.error('no config'); process.exit(3)\"]\n    %s", everything.Ref, node, nonRoot),
		fixed:   fmt.Sprintf("image: %s\n    command: %s\n    %s", everything.Ref, yamlList(everything.Command), nonRoot),
		reason:  mcpv1alpha1.ReasonServerExited,
		message: []string{"exited with code", "no config", "exit status 3"},
	}, {
		name: "an image that runs as root in a restricted namespace", server: "runs-as-root",
		broken:  fmt.Sprintf("image: %s\n    command: %s", root.Ref, yamlList(root.Command)),
		fixed:   fmt.Sprintf("image: %s\n    command: %s\n    %s", hello.Ref, yamlList(hello.Command), nonRoot),
		reason:  mcpv1alpha1.ReasonPodRejected,
		message: []string{"PodSecurity", "runAsNonRoot"},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			name := tt.server
			apply := func(stdio string) {
				kubectlApply(t, fmt.Sprintf("apiVersion: mcp.switchboard.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: %s, namespace: %s}\nspec:\n  stdio:\n    %s\n", name, namespace, stdio))
			}
			apply(tt.broken)
			var ready *metav1.Condition
			testutil.Eventually(t, waitTimeout, "Ready=False with reason "+tt.reason, func() error {
				var s mcpv1alpha1.MCPServer
				getJSON(t, &s, "mcpserver", name, "-n", namespace)
				ready = apimeta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady)
				if ready == nil || ready.Status != "False" || ready.Reason != tt.reason {
					return fmt.Errorf("Ready is %+v", ready)
				}
				return nil
			})
			t.Logf("%s: %s", ready.Reason, ready.Message)
			for _, want := range tt.message {
				if !strings.Contains(ready.Message, want) {
					t.Errorf("the message does not name %q: %s", want, ready.Message)
				}
			}
			if reasons := eventReasons(t, namespace, "MCPServer", name); !slices.Contains(reasons, tt.reason) {
				t.Errorf("no %s Event on the server; its Events: %v", tt.reason, reasons)
			}

			apply(tt.fixed)
			waitServerReady(t, namespace, name)
		})
	}
}
