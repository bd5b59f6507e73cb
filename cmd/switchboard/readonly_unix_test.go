//go:build unix

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// goPanic matches the first line Go prints for a panic that ends a program.
var goPanic = regexp.MustCompile(`(?m)^panic: `)

// TestBinaryStartsWithAReadOnlyHomeAndTempFolder runs the switchboard binary as a pod
// with readOnlyRootFilesystem does: HOME and TMPDIR name a folder it cannot write and
// XDG_CACHE_HOME is unset. Every subcommand a pod runs must start, not panic on the way
// (the bridge's init container runs install, its server container bridge).
func TestBinaryStartsWithAReadOnlyHomeAndTempFolder(t *testing.T) {
	// Folders another user can reach: the test runs the binary as nobody when it runs as
	// root, to whom no folder is read-only.
	dir, err := os.MkdirTemp("", "switchboard-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	readOnly, shared := filepath.Join(dir, "readonly"), filepath.Join(dir, "shared")
	for path, mode := range map[string]os.FileMode{dir: 0o755, readOnly: 0o555, shared: 0o777} {
		if err := os.MkdirAll(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // MkdirAll's mode is cut by the umask
			t.Fatal(err)
		}
	}
	// Copied into dir, where the nobody user can reach it: the build's own folder is its
	// owner's alone.
	bin := filepath.Join(dir, "switchboard")
	built, err := os.ReadFile(testenv.BuildGoBinary(t, "./cmd/switchboard"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, built, 0o755); err != nil { //nolint:gosec // run as nobody, so world-executable
		t.Fatal(err)
	}

	var env []string
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "TMPDIR" && name != "XDG_CACHE_HOME" {
			env = append(env, kv)
		}
	}
	env = append(env, "HOME="+readOnly, "TMPDIR="+readOnly)
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(context.Background(), name, args...)
		cmd.Dir, cmd.Env = dir, env
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		}
		return cmd
	}
	// The premise: the binary's user cannot create anything in HOME or TMPDIR.
	if out, err := command("mkdir", filepath.Join(readOnly, "probe")).CombinedOutput(); err == nil {
		t.Fatalf("the binary's user can write %s, which the test needs read-only:\n%s", readOnly, out)
	}

	installed := filepath.Join(shared, "switchboard")
	for _, tc := range []struct {
		args     []string
		wantCode int
	}{
		{[]string{"--help"}, 2}, // usage, as for any missing subcommand
		{[]string{"manager", "--help"}, 0},
		{[]string{"bridge", "--help"}, 0},
		{[]string{"dev", "--help"}, 0},
		{[]string{"install", installed}, 0},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := command(bin, tc.args...).CombinedOutput()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if goPanic.Match(out) || code != tc.wantCode {
				t.Errorf("switchboard %s exited with %d (want %d) or panicked:\n%s", strings.Join(tc.args, " "), code, tc.wantCode, out)
			}
		})
	}
	if info, err := os.Stat(installed); err != nil || info.Mode().Perm()&0o111 != 0o111 {
		t.Errorf("switchboard install did not leave an executable at %s (%v)", installed, err)
	}
}
