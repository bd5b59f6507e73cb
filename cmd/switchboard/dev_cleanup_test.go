//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestDevStopsEverythingItStartedHoweverItIsEnded runs `switchboard dev` with its output
// piped to the test, as `make dev | tee dev.log` pipes it to tee, and ends it the ways a
// person's session ends it: the reader of the pipe exits (early, while dev starts, or once
// it is up), or dev receives SIGINT, SIGTERM or SIGHUP, or it is killed outright. Each
// time, no process dev started (etcd, kube-apiserver, the stdio bridge and its server)
// may be left running.
func TestDevStopsEverythingItStartedHoweverItIsEnded(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildSwitchboard(t)

	for _, tc := range []struct {
		name string
		// until is the line of dev's output after which end ends it.
		until string
		end   func(t *testing.T, run *devRun)
		// cleanExit says dev itself must exit with status 0; a killed dev cannot.
		cleanExit bool
	}{
		{"output closed while starting", "==> Starting etcd and kube-apiserver", closeOutput, true},
		{"output closed once up", "Press Ctrl-C to stop.", closeOutput, true},
		{"SIGINT", "Press Ctrl-C to stop.", signalDev(syscall.SIGINT), true},
		{"SIGTERM", "Press Ctrl-C to stop.", signalDev(syscall.SIGTERM), true},
		{"SIGHUP", "Press Ctrl-C to stop.", signalDev(syscall.SIGHUP), true},
		{"SIGHUP with output closed", "Press Ctrl-C to stop.", func(t *testing.T, run *devRun) {
			// A closed terminal: the hangup and a dead reader at once, so that every line
			// dev prints while it stops fails with EPIPE.
			closeOutput(t, run)
			signalDev(syscall.SIGHUP)(t, run)
		}, true},
		{"SIGKILL", "Press Ctrl-C to stop.", signalDev(syscall.SIGKILL), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := startDev(t, bin, assets, tc.until)
			tc.end(t, run)
			select {
			case err := <-run.exited:
				if tc.cleanExit && err != nil {
					t.Errorf("dev exited with %v, want a clean stop:\n%s\n%s", err, run.output, run.stderr.String())
				}
			case <-time.After(time.Minute):
				t.Fatalf("dev did not stop within a minute:\n%s\n%s", run.output, run.stderr.String())
			}
			started := run.stopWatching()
			if len(started) < 2 {
				t.Fatalf("saw %d processes started by dev, want etcd and kube-apiserver at least", len(started))
			}
			// A process dev started may take a moment to die once dev is gone (a killed
			// dev's children get their SIGKILL from the kernel, as dev exits).
			deadline := time.Now().Add(10 * time.Second)
			for _, p := range started {
				for p.alive() && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				if p.alive() {
					t.Errorf("process %d (%s) outlived dev", p.pid, p.cmdline)
					_ = syscall.Kill(p.pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// devRun is one `switchboard dev` process whose output the test reads through a pipe.
type devRun struct {
	cmd    *exec.Cmd
	reader *os.File
	output *lockedLines
	stderr *strings.Builder
	exited chan error

	mu      sync.Mutex
	seen    map[int]devChild
	watched chan struct{}
}

// devChild is a process below dev, told apart from a later process with its pid by its
// start time.
type devChild struct {
	pid       int
	startTime string
	cmdline   string
}

func (p devChild) alive() bool {
	return alive(p.pid) && startTime(p.pid) == p.startTime
}

// startDev starts dev with its standard output to a pipe and reads it until the line
// until. It records every process below dev, every 50 ms, until stopWatching.
func startDev(t *testing.T, bin, assets, until string) *devRun {
	t.Helper()
	reader, writer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), bin, "dev", "--dir", t.TempDir(),
		"--catalog-bind-address", freeAddr(t), "--metrics-bind-address", "0")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), "KUBEBUILDER_ASSETS="+assets)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = writer
	run := &devRun{
		cmd: cmd, reader: reader, output: &lockedLines{}, stderr: &strings.Builder{},
		exited: make(chan error, 1), seen: map[int]devChild{}, watched: make(chan struct{}),
	}
	cmd.Stderr = run.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = writer.Close() // dev holds the only write end: closing the reader leaves it none
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = reader.Close()
	})
	go func() { run.exited <- cmd.Wait() }()
	go run.watch()

	reached := make(chan struct{})
	go func() {
		scanner := bufio.NewScanner(reader)
		signalled := false
		for scanner.Scan() {
			run.output.add(scanner.Text())
			if !signalled && scanner.Text() == until {
				signalled = true
				close(reached)
			}
		}
	}()
	select {
	case <-reached:
	case err := <-run.exited:
		t.Fatalf("dev exited (%v) before printing %q:\n%s\n%s", err, until, run.output, run.stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("dev did not print %q within 3 minutes:\n%s\n%s", until, run.output, run.stderr.String())
	}
	return run
}

// watch records the processes below dev until stopWatching.
func (r *devRun) watch() {
	for {
		for _, pid := range descendants(r.cmd.Process.Pid) {
			r.mu.Lock()
			if _, ok := r.seen[pid]; !ok {
				if st := startTime(pid); st != "" {
					r.seen[pid] = devChild{pid: pid, startTime: st, cmdline: cmdline(pid)}
				}
			}
			r.mu.Unlock()
		}
		select {
		case <-r.watched:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stopWatching returns every process seen below dev.
func (r *devRun) stopWatching() []devChild {
	close(r.watched)
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []devChild
	for _, p := range r.seen {
		out = append(out, p)
	}
	return out
}

// closeOutput closes the test's end of dev's output pipe, as tee exiting first would.
func closeOutput(t *testing.T, run *devRun) {
	t.Helper()
	if err := run.reader.Close(); err != nil {
		t.Fatal(err)
	}
}

// signalDev sends sig to dev alone, not its process group: whatever else must stop, dev
// stops it.
func signalDev(sig syscall.Signal) func(t *testing.T, run *devRun) {
	return func(t *testing.T, run *devRun) {
		t.Helper()
		if err := run.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}
}

// startTime is a process's start time in clock ticks since boot, from /proc/PID/stat, or
// "" when it is gone.
func startTime(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 20 {
		return ""
	}
	return fields[19] // field 22 of stat; fields here start at field 3
}
