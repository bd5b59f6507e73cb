package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// approvalKeyField is the key of the approval key in its Secret.
const approvalKeyField = "approval-key"

// minApprovalKeyBytes is the shortest approval key accepted: an HMAC-SHA256 key as long
// as its output.
const minApprovalKeyBytes = 32

// approvalKey reads the key every replica signs and checks the approvals of 2026-07-28
// clients with, from the Secret ref names (NAMESPACE/NAME). Its errors name the Secret
// and what is wrong with it, never its value.
func approvalKey(ctx context.Context, reader client.Reader, ref string) ([]byte, error) {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--gateway-approval-key-secret %q is not NAMESPACE/NAME", ref)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var secret corev1.Secret
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &secret); err != nil {
		return nil, fmt.Errorf("reading the approval key Secret %s: %w", ref, err)
	}
	key := secret.Data[approvalKeyField]
	if len(key) < minApprovalKeyBytes {
		return nil, fmt.Errorf("the approval key Secret %s has %d bytes under %q; it needs at least %d", ref, len(key), approvalKeyField, minApprovalKeyBytes)
	}
	return key, nil
}
