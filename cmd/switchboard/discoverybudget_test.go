package main

import (
	"strings"
	"testing"

	"github.com/switchboard-mcp/switchboard/connector"
)

func TestDiscoveryMemoryBudgetFlag(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    int64
		wantErr string
	}{
		{name: "unset is the default", want: connector.DefaultDiscoveryMemoryBudget},
		{name: "binary quantity", args: []string{"--discovery-memory-budget=64Mi"}, want: 64 << 20},
		{name: "decimal quantity", args: []string{"--discovery-memory-budget", "1G"}, want: 1_000_000_000},
		{name: "not a quantity", args: []string{"--discovery-memory-budget=lots"}, wantErr: `"lots" is not a positive quantity`},
		{name: "zero", args: []string{"--discovery-memory-budget=0"}, wantErr: "not a positive quantity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := parseManagerFlags(tt.args...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parsing %v: error %v, want one containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.discoveryMemoryBudget != tt.want {
				t.Errorf("budget = %d, want %d", opts.discoveryMemoryBudget, tt.want)
			}
		})
	}
}
