//go:build node && linux

package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// waitTimeout bounds how long a broken step takes to fail; a healthy one takes seconds.
const waitTimeout = 3 * time.Minute

var (
	// kubeconfigPath is the node's admin kubeconfig, from `hack/node.sh up`.
	kubeconfigPath string
	// images are the references `hack/node.sh images` printed, by name.
	images map[string]image
	// repoRoot is the checkout under test.
	repoRoot = testenv.RepoRoot()
)

// image is one loaded image: its reference and, for a stdio server's image, the command
// that starts its server.
type image struct {
	Ref     string
	Command []string
}

func TestMain(m *testing.M) {
	kubeconfigPath = os.Getenv("SWITCHBOARD_NODE_KUBECONFIG")
	list := os.Getenv("SWITCHBOARD_NODE_IMAGES")
	if kubeconfigPath == "" || list == "" {
		fmt.Fprintln(os.Stderr, "SWITCHBOARD_NODE_KUBECONFIG and SWITCHBOARD_NODE_IMAGES are unset: run the node tests with `make test-node`")
		os.Exit(1)
	}
	images = parseImages(list)
	os.Exit(m.Run())
}

// parseImages reads `hack/node.sh images`: a reference a line, a server image's followed
// by a tab and its command. An image is named by the last element of its repository.
func parseImages(list string) map[string]image {
	out := map[string]image{}
	scanner := bufio.NewScanner(strings.NewReader(list))
	for scanner.Scan() {
		ref, command, _ := strings.Cut(scanner.Text(), "\t")
		if ref == "" {
			continue
		}
		repo := ref[:strings.LastIndex(ref, ":")]
		out[repo[strings.LastIndex(repo, "/")+1:]] = image{Ref: ref, Command: strings.Fields(command)}
	}
	return out
}

// imageNamed returns the loaded image of that name, failing the test when there is none.
func imageNamed(t testing.TB, name string) image {
	t.Helper()
	img, ok := images[name]
	if !ok {
		t.Fatalf("hack/node.sh images lists no %q image; it lists %v", name, images)
	}
	return img
}

// kubectl runs kubectl against the node and returns its stdout; it fails the test when
// kubectl fails.
func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// kubectlErr runs kubectl and returns its stdout, or an error carrying its stderr.
func kubectlErr(args ...string) (string, error) {
	return run(nil, "kubectl", append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
}

// kubectlApply applies YAML documents with `kubectl apply -f -`.
func kubectlApply(t testing.TB, manifest string) {
	t.Helper()
	if _, err := run(strings.NewReader(manifest), "kubectl", "--kubeconfig", kubeconfigPath, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply:\n%s\n%v", manifest, err)
	}
}

// run runs a command with a generous timeout and returns its stdout, or an error with
// its stderr.
func run(stdin *strings.Reader, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Dir = repoRoot
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// getJSON reads an object (or list) with kubectl into out.
func getJSON(t testing.TB, out any, args ...string) {
	t.Helper()
	text := kubectl(t, append([]string{"get", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(text), out); err != nil {
		t.Fatalf("decoding kubectl get %v: %v", args, err)
	}
}

// jsonDecode decodes kubectl's JSON output.
func jsonDecode(text string, out any) error {
	return json.Unmarshal([]byte(text), out)
}

// helm runs the Helm binary go.mod pins, keeping it away from the user's repositories
// and caches.
func helm(t testing.TB, args ...string) string {
	t.Helper()
	out, err := helmErr(args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func helmErr(args ...string) (string, error) {
	home, err := os.MkdirTemp("", "helm-home")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	helm, err := testenv.GoBinary(testenv.HelmCommand)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, helm, append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// step runs one step of a scenario as a subtest and stops the scenario when it fails:
// later steps build on earlier ones.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}
