package testutil

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// KStatus computes what a GitOps tool that waits with kstatus would make of obj.
func KStatus(tb testing.TB, obj runtime.Object) status.Status {
	tb.Helper()
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		tb.Fatal(err)
	}
	res, err := status.Compute(&unstructured.Unstructured{Object: u})
	if err != nil {
		tb.Fatal(err)
	}
	return res.Status
}
