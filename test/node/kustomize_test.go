//go:build node && linux

package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// kustomizeInstall is what `kubectl apply -k config/default` creates.
var kustomizeInstall = install{
	deployment:     "switchboard-manager",
	selector:       "app.kubernetes.io/name=switchboard,app.kubernetes.io/component=manager",
	catalogService: "switchboard-catalog",
}

// TestKustomize installs config/default as docs/getting-started.md says, on a copy of
// config/ so that the checkout stays as it is: `kustomize edit set image`, then
// `kubectl apply -k`. It runs after TestHelm, whose uninstall kept the CRDs and the
// MCPServers: the server it left becomes Ready again under this install.
func TestKustomize(t *testing.T) {
	sb := imageNamed(t, "switchboard")
	config := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(config, os.DirFS(filepath.Join(repoRoot, "config"))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpDiagnostics(t, kustomizeInstall)
		}
	})

	step(t, "kubectl apply -k with the image set as getting-started says", func(t *testing.T) {
		// The kustomize go.mod's tool directive pins, built here: `go tool` runs only
		// inside the module, and the copy of config/ is outside it.
		kustomize := testenv.BuildGoBinary(t, testenv.KustomizeCommand)
		edit := exec.CommandContext(t.Context(), kustomize, "edit", "set", "image", "switchboard="+sb.Ref)
		edit.Dir = filepath.Join(config, "default")
		if out, err := edit.CombinedOutput(); err != nil {
			t.Fatalf("kustomize edit set image: %v\n%s", err, out)
		}
		kubectl(t, "apply", "-k", filepath.Join(config, "default"))
		kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+kustomizeInstall.deployment, "--timeout=3m")
	})
	step(t, "two replicas pass their probes and one holds the Lease", func(t *testing.T) {
		checkReplicas(t, kustomizeInstall)
	})
	step(t, "the stdio server is served again and agents call it", func(t *testing.T) {
		waitServerReady(t, "stdio-restricted", "everything")
		// The status is the old install's until the new one has connected: the call says
		// when it serves.
		endpoint, token := gatewayEndpoint(t, kustomizeInstall, "stdio-restricted", "everything"), agentToken(t)
		testutil.Eventually(t, waitTimeout, "a call through the kustomize install's gateway", func() error {
			return callOnce(endpoint, token, "through kustomize")
		})
	})
	step(t, "kubectl delete -k leaves nothing behind", func(t *testing.T) {
		// The servers first, while the operator that removes their finalizers runs.
		kubectl(t, "delete", "mcpservers", "--all", "--all-namespaces", "--wait")
		kubectl(t, "delete", "-k", filepath.Join(config, "default"), "--wait")
		checkUninstalled(t, kustomizeInstall, false)
	})
}
