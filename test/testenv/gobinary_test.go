package testenv

import "testing"

func TestCommandNameIsTheNameGoInstallGives(t *testing.T) {
	for pkg, want := range map[string]string{
		"./cmd/switchboard":                  "switchboard",
		HelmCommand:                          "helm",
		KustomizeCommand:                     "kustomize",
		"github.com/example/tool/v2/cmd/v8s": "v8s",
		"example.com/v2":                     "example.com",
	} {
		if got := commandName(pkg); got != want {
			t.Errorf("commandName(%q) = %q, want %q", pkg, got, want)
		}
	}
}
