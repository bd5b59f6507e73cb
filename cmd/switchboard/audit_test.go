package main

import (
	"bytes"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// The audit log keeps a line for every tool call however many come in a second, where
// the manager's own production logger keeps only every 100th repeat beyond 100.
func TestTheAuditLogIsNeverSampled(t *testing.T) {
	var audit, manager bytes.Buffer
	opts := zap.Options{} // the manager's defaults: production, Info
	auditLog := auditLogger(zap.Options{DestWriter: &audit}).WithName("gateway").WithName("audit")
	managerOpts := opts
	managerOpts.DestWriter = &manager
	managerLog := zap.New(zap.UseFlagOptions(&managerOpts))
	const calls = 500
	for i := range calls {
		auditLog.Info("Tool call", "tool", "echo", "outcome", "ok", "n", i)
		managerLog.Info("Tool call", "n", i)
	}
	if got := strings.Count(audit.String(), `"Tool call"`); got != calls {
		t.Errorf("the audit log kept %d of %d tool call lines", got, calls)
	}
	if got := strings.Count(manager.String(), `"Tool call"`); got >= calls {
		t.Errorf("the manager's logger kept all %d lines: the test no longer shows what sampling loses", got)
	}
	if strings.Contains(audit.String(), `"level":"debug"`) || !strings.Contains(audit.String(), `"level":"info"`) {
		t.Errorf("the audit log's lines are not the manager's JSON Info lines:\n%s", audit.String()[:200])
	}
}
