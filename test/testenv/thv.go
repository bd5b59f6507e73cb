package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Thv returns the path of ToolHive's thv, the HTTP proxy the gateway benchmark compares
// against: SWITCHBOARD_THV when set, otherwise the binary hack/test-servers.sh --thv
// built. Unlike the other lookups it never builds (that takes minutes): it returns an
// error when thv is not there.
func Thv() (string, error) {
	if path := os.Getenv("SWITCHBOARD_THV"); path != "" {
		return path, nil
	}
	script := filepath.Join(RepoRoot(), "hack", "test-servers.sh")
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(context.Background(), "bash", script, "--thv")
	cmd.Env = append(os.Environ(), "SWITCHBOARD_NO_BUILD=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", strings.TrimSpace(stderr.String()), err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// StartThvProxy runs ToolHive's `thv proxy` on a free loopback port in front of the MCP
// endpoint targetURL and returns the proxied endpoint's URL once thv answers. thv forwards
// every path to the target's host as it is, so the returned URL keeps targetURL's path.
// It runs without a container runtime or cluster, with a HOME of its own. It skips the
// test or benchmark, saying how to get thv, when thv is not installed. The proxy is
// killed when the test ends.
func StartThvProxy(t testing.TB, targetURL string) string {
	t.Helper()
	bin, err := Thv()
	if err != nil {
		t.Skipf("ToolHive's thv is not available (%v): build it with hack/test-servers.sh --thv (several minutes the first time) or set SWITCHBOARD_THV to a thv binary", err)
	}
	target, err := url.Parse(targetURL)
	if err != nil || target.Host == "" {
		t.Fatalf("thv proxy target %q is not an absolute URL", targetURL)
	}
	port := strconv.Itoa(FreePort(t))
	// thv rejects a target with a path; it joins the request's path to the target's.
	upstream := target.Scheme + "://" + target.Host
	cmd := exec.Command(bin, "proxy", "switchboard-peer", //nolint:noctx // killed at cleanup
		"--host", "127.0.0.1", "--port", port, "--target-uri", upstream)
	home := t.TempDir()
	// The kubernetes runtime with a made-up API server keeps thv from looking for a
	// container engine; proxy never talks to the cluster. Its config and state go to a
	// HOME of its own, whatever the XDG folders of the caller say.
	cmd.Env = append(os.Environ(),
		"TOOLHIVE_SKIP_UPDATE_CHECK=true",
		"TOOLHIVE_RUNTIME=kubernetes",
		"KUBERNETES_SERVICE_HOST=127.0.0.1",
		"HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"),
		"XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
	)
	base := "http://127.0.0.1:" + port
	// /health is thv's own: it answers without a request reaching the target.
	StartHTTPServerProcess(t, "thv proxy", cmd, base+"/health")
	proxied := &url.URL{Scheme: "http", Host: "127.0.0.1:" + port, Path: target.Path, RawPath: target.RawPath, RawQuery: target.RawQuery}
	return proxied.String()
}
