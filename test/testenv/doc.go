// Package testenv starts the test control plane: a real kube-apiserver and etcd through
// controller-runtime's envtest, with Switchboard's CRDs installed from config/crd/bases.
//
// It finds the binaries without anyone exporting anything: KUBEBUILDER_ASSETS when it is
// set (the Makefile sets it), otherwise hack/envtest-assets.sh, which prints the cache
// folder and builds the binaries there on first use. So `go test` from an editor works.
// ServerEverything finds the npm MCP reference server the same way, and ConformanceSuite
// the official MCP conformance suite (hack/test-servers.sh --conformance).
//
// It also runs the peers tests compare Switchboard against: go-sdk's conformance server
// (StartConformanceServer), the conformance suite's server scenarios against any MCP
// endpoint (RunConformanceServerSuite, with DiffConformance to compare a run through
// Switchboard with a direct one), and ToolHive's thv proxy for benchmarks
// (StartThvProxy, which skips when hack/test-servers.sh --thv has not built thv), and
// zitadel/oidc's example OpenID provider for login tests (StartZitadelOP, which skips
// without SWITCHBOARD_ZITADEL_OP; ZitadelLogin, or ZitadelOAuthHandler for go-sdk's MCP
// client, drive its login page as a browser would). Every server listens on 127.0.0.1
// and dies with the test.
//
// Test code only: nothing outside _test.go files and test programs may import it.
package testenv
