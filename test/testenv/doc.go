// Package testenv starts the test control plane: a real kube-apiserver and etcd through
// controller-runtime's envtest, with Switchboard's CRDs installed from config/crd/bases.
//
// It finds the binaries without anyone exporting anything: KUBEBUILDER_ASSETS when it is
// set (the Makefile sets it), otherwise hack/envtest-assets.sh, which prints the cache
// folder and builds the binaries there on first use. So `go test` from an editor works.
// ServerEverything finds the npm MCP reference server the same way.
//
// Test code only: nothing outside _test.go files and test programs may import it.
package testenv
