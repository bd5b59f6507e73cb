// Package install tests the kustomize install manifests in config/: they render with
// kustomize/api and every object they hold is accepted by a real API server.
package install
