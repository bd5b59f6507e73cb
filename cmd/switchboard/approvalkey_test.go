package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestApprovalKeyComesFromItsSecret: every replica reads the same key from the Secret the
// flag names; a Secret that is missing, holds no key or too short a one stops the manager
// with a message that names it and never its value.
func TestApprovalKeyComesFromItsSecret(t *testing.T) {
	good := strings.Repeat("k", 48)
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "switchboard-system", Name: name}, Data: data}
	}
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		secret("approval", map[string][]byte{approvalKeyField: []byte(good)}),
		secret("short", map[string][]byte{approvalKeyField: []byte("s3cr3t-but-short")}),
		secret("other-key", map[string][]byte{"key": []byte(good)}),
	).Build()

	key, err := approvalKey(context.Background(), reader, "switchboard-system/approval")
	if err != nil || string(key) != good {
		t.Fatalf("approvalKey = %q, %v; want the Secret's key", key, err)
	}
	for _, tc := range []struct{ ref, want string }{
		{"switchboard-system/missing", `reading the approval key Secret switchboard-system/missing`},
		{"switchboard-system/short", `has 16 bytes under "approval-key"; it needs at least 32`},
		{"switchboard-system/other-key", `has 0 bytes under "approval-key"`},
		{"approval", `is not NAMESPACE/NAME`},
		{"a/b/c", `is not NAMESPACE/NAME`},
	} {
		_, err := approvalKey(context.Background(), reader, tc.ref)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("approvalKey(%q) = %v; want an error saying %q", tc.ref, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("approvalKey(%q) quotes the key: %v", tc.ref, err)
		}
	}
}
