package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// childProcAttr puts a child of dev in a process group of its own, so that dev can stop
// it and whatever it started, and has the kernel kill it should dev die without doing so.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// guardedControlPlane returns the paths dev gives envtest for etcd and kube-apiserver:
// scripts in dir that start the binaries in assets through `switchboard dev-child`, so
// that the kernel kills them should dev die without stopping them (SIGKILL, a crash).
// envtest starts them in process groups of their own, which a terminal's Ctrl-C does not
// reach, and offers no way to set the parent-death signal itself.
func guardedControlPlane(dir, assets string) (etcd, apiServer string, err error) {
	self, err := os.Executable()
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	paths := make([]string, 2)
	for i, name := range []string{"etcd", "kube-apiserver"} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s dev-child %d %s \"$@\"\n",
			shellQuote(self), os.Getpid(), shellQuote(filepath.Join(assets, name)))
		paths[i] = filepath.Join(dir, name)
		if err := os.WriteFile(paths[i], []byte(script), 0o700); err != nil { //nolint:gosec // a script dev runs
			return "", "", err
		}
	}
	return paths[0], paths[1], nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runDevChild is `switchboard dev-child PARENT-PID BINARY ARGS...`, which dev's scripts
// run: it asks the kernel to kill this process when its parent dies, checks that its
// parent is still the dev process PARENT-PID, and then becomes BINARY, which keeps the
// parent-death signal. Not a subcommand for people; the usage does not list it.
func runDevChild(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "Usage: switchboard dev-child PARENT-PID BINARY [ARGS...]")
		return 2
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "switchboard dev-child: parent pid: %v\n", err)
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "switchboard dev-child: %v\n", err)
		return 1
	}
	// dev may have died before the signal was asked for: then nobody would stop BINARY.
	if os.Getppid() != parent {
		fmt.Fprintln(os.Stderr, "switchboard dev-child: switchboard dev has stopped")
		return 1
	}
	err = syscall.Exec(args[1], args[1:], os.Environ()) //nolint:gosec // the control plane binary dev chose
	fmt.Fprintf(os.Stderr, "switchboard dev-child: %v\n", err)
	return 1
}
