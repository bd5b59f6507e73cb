package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// runInstall copies the running switchboard binary to the path given as its argument.
// It is what the init container of a stdio server pod runs: the operator image is
// distroless, so there is no cp to do it, and the server container then runs the
// copied binary's bridge subcommand in front of the user's command.
func runInstall(args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprintln(os.Stderr, "Usage: switchboard install DEST")
		return 0
	}
	// A destination that looks like a flag is a mistake, not a file to create.
	if len(args) != 1 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, "Usage: switchboard install DEST")
		return 2
	}
	if err := installSelf(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "switchboard install: %v\n", err)
		return 1
	}
	return 0
}

// installSelf copies the running executable to dest, executable by everyone, through a
// temporary file so that a half-written binary is never run.
func installSelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locating own executable: %w", err)
	}
	src, err := os.Open(self) //nolint:gosec // our own executable, by design
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".switchboard-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := io.Copy(tmp, src); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("copying %s: %w", self, err)
	}
	if err := tmp.Chmod(0o755); err != nil { //nolint:gosec // the bridge must be executable by the server's user
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest) //nolint:gosec // dest is the operator's own pod spec argument
}
