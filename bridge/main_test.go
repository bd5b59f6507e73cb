package bridge_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// testServerEnv makes the test binary act as the helper MCP server instead of running
// tests, so that the tests need no separate build step.
const testServerEnv = "SWITCHBOARD_BRIDGE_TEST_SERVER"

func TestMain(m *testing.M) {
	// Before the helper server: the bare pipe's environment is that of the server it runs.
	if addr := os.Getenv(floorEnv); addr != "" {
		fmt.Fprintln(os.Stderr, "bare pipe:", runBarePipe(addr))
		os.Exit(1)
	}
	if os.Getenv(testServerEnv) == "1" {
		if err := runTestServer(); err != nil {
			fmt.Fprintln(os.Stderr, "test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testServerCommand is the argv that runs the helper server, and the environment it needs.
func testServerCommand(t testing.TB) (argv, env []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Under -race, a process sleeps a second at exit by default: that would make the
	// helper look like a server that ignores stdin EOF.
	return []string{exe}, append(os.Environ(), testServerEnv+"=1", "GORACE=atexit_sleep_ms=0")
}

// linger makes the helper server outlive its stdin, so that only SIGKILL stops it.
var linger atomic.Bool

type echoArgs struct {
	Message string `json:"message"`
}

type exitArgs struct {
	Code int `json:"code"`
}

type floodArgs struct {
	Bytes int `json:"bytes"`
}

// blockArgs name two files: the tool creates Started as it begins and returns once
// Release exists, so a test holds a call in flight for exactly as long as it needs.
type blockArgs struct {
	Started string `json:"started"`
	Release string `json:"release"`
}

type sleepArgs struct {
	Milliseconds int `json:"milliseconds"`
}

type stderrArgs struct {
	Lines int    `json:"lines"`
	Text  string `json:"text"`
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// runTestServer is a small, fast, deterministic stdio MCP server built from go-sdk, with
// tools that misbehave on request.
func runTestServer() error {
	server := mcp.NewServer(&mcp.Implementation{Name: "bridge-test-server", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Echoes the message."},
		func(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
			return textResult(args.Message), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "pid", Description: "Returns the server's process ID."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return textResult(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "exit", Description: "Exits the server process at once."},
		func(_ context.Context, _ *mcp.CallToolRequest, args exitArgs) (*mcp.CallToolResult, any, error) {
			os.Exit(args.Code)
			return nil, nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "flood", Description: "Writes one line of the given size to stdout."},
		func(_ context.Context, _ *mcp.CallToolRequest, args floodArgs) (*mcp.CallToolResult, any, error) {
			// The start of a valid message, so that only its size is wrong.
			if _, err := io.WriteString(os.Stdout, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`); err != nil {
				return nil, nil, err
			}
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for n := 0; n < args.Bytes; n += len(chunk) {
				if _, err := os.Stdout.Write(chunk); err != nil {
					return nil, nil, err
				}
			}
			return textResult("flooded"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "stderr", Description: "Writes lines to stderr."},
		func(_ context.Context, _ *mcp.CallToolRequest, args stderrArgs) (*mcp.CallToolResult, any, error) {
			line := args.Text + "\n"
			fmt.Fprint(os.Stderr, strings.Repeat(line, args.Lines))
			return textResult("written"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "spawn", Description: "Starts a long sleep in the server's process group and returns its PID."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			cmd := exec.CommandContext(context.Background(), "sleep", "300")
			// Not its own group: the bridge must kill it with the server.
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go func() { _ = cmd.Wait() }()
			return textResult(strconv.Itoa(cmd.Process.Pid)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "sleep", Description: "Returns after the given time, as a tool that waits on I/O does."},
		func(ctx context.Context, _ *mcp.CallToolRequest, args sleepArgs) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(args.Milliseconds) * time.Millisecond):
				return textResult("slept"), nil, nil
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(server, &mcp.Tool{Name: "block", Description: "Returns once the release file exists."},
		func(ctx context.Context, _ *mcp.CallToolRequest, args blockArgs) (*mcp.CallToolResult, any, error) {
			if err := os.WriteFile(args.Started, nil, 0o600); err != nil {
				return nil, nil, err
			}
			for {
				if _, err := os.Stat(args.Release); err == nil {
					return textResult("released"), nil, nil
				}
				select {
				case <-ctx.Done():
					return nil, nil, ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	mcp.AddTool(server, &mcp.Tool{Name: "linger", Description: "Makes the server outlive its stdin."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			linger.Store(true)
			return textResult("ok"), nil, nil
		})
	err := server.Run(context.Background(), &mcp.StdioTransport{})
	if linger.Load() {
		time.Sleep(time.Hour) // until SIGKILL
	}
	return err
}

// exists reports whether pid names a process, zombies included: a direct child that
// still exists after its session ended was not reaped.
func exists(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// alive reports whether pid is a running process (a zombie counts as gone: it runs no
// code, and only its parent can reap it).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
