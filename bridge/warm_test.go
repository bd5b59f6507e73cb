package bridge_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// markedProcesses returns the running processes whose environment holds mark.
func markedProcesses(t *testing.T, mark string) []int {
	t.Helper()
	environs, err := filepath.Glob("/proc/[0-9]*/environ")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, path := range environs {
		env, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(env, []byte(mark)) {
			continue // gone meanwhile, or someone else's
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestWarmProcessIsStartedAheadAndReplaced(t *testing.T) {
	mark := "SWITCHBOARD_BRIDGE_TEST_MARK=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	opts := helperOptions(t)
	opts.Env = append(opts.Env, mark)
	opts.WarmProcesses = 1
	r := startBridge(t, opts)

	var spare int
	eventually(t, 10*time.Second, "a warm process before any session", func() bool {
		pids := markedProcesses(t, mark)
		if len(pids) == 1 {
			spare = pids[0]
		}
		return len(pids) == 1
	})
	if n := len(r.Sessions()); n != 0 {
		t.Fatalf("%d sessions before any client", n)
	}

	cs := r.mustConnect(t)
	if got := mustPID(t, cs, "pid"); got != spare {
		t.Errorf("the session runs process %d, want the warm one %d", got, spare)
	}
	eventually(t, 10*time.Second, "a new warm process besides the session's", func() bool {
		return len(markedProcesses(t, mark)) == 2
	})

	r.stop(t)
	if pids := markedProcesses(t, mark); len(pids) != 0 {
		t.Errorf("processes left after shutdown, the warm one among them: %v", pids)
	}
}

func TestWarmProcessesMayNotBeNegative(t *testing.T) {
	opts := helperOptions(t)
	opts.WarmProcesses = -1
	if _, err := bridge.New(opts); err == nil {
		t.Error("New accepted WarmProcesses -1")
	}
}
