// Package devcluster runs a throwaway Kubernetes control plane on loopback for
// `switchboard dev`: etcd and kube-apiserver as child processes, a serving certificate,
// a client CA and a service-account signing key generated at start, authentication by
// client certificates and RBAC authorisation, the CRDs of a folder installed and
// Established, and kubeconfigs for users it issues certificates to.
//
// It exists so that the switchboard binary does not link controller-runtime's envtest,
// whose internal packages create a cache folder in an init function and panic when they
// cannot: that crashed every production container with a read-only root filesystem.
// Tests keep using envtest (test/testenv); this package is for the dev command only and
// must not import envtest or anything under controller-runtime's internal/testing.
//
// The control plane is for one person's machine: etcd skips fsync, nothing is kept
// between runs, and the processes die with the process that started them (on Linux the
// kernel kills them should it die without stopping them).
package devcluster
