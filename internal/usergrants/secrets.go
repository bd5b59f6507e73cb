package usergrants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Labels and annotations of the Secrets this package writes. None holds a secret.
const (
	// LabelManagedBy marks them as Switchboard's.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelKind says what the Secret holds: KindGrant or KindFlow.
	LabelKind = "mcp.switchboard.dev/user-authorization"
	// LabelCaller is a digest of the caller's identity key, to list one caller's
	// Secrets (never the key itself).
	LabelCaller = "mcp.switchboard.dev/caller-digest"
	// AnnotationUsername is the person's username, for the admin's list.
	AnnotationUsername = "mcp.switchboard.dev/username"
	// AnnotationServer is the server, namespace/name.
	AnnotationServer = "mcp.switchboard.dev/server"
	// AnnotationExpires is when a flow expires (RFC 3339), so expired ones are swept
	// without opening them.
	AnnotationExpires = "mcp.switchboard.dev/expires"

	// KindGrant is a person's grant.
	KindGrant = "grant"
	// KindFlow is an authorization in flight.
	KindFlow = "flow"

	// secretType is the type of the Secrets, so they stand apart in kubectl get.
	secretType corev1.SecretType = "mcp.switchboard.dev/user-authorization"
	// dataKey is the data key that holds the sealed value.
	dataKey   = "sealed"
	managedBy = "switchboard"
)

// Sealer seals and opens values bound to additional data; SecretKeys is one.
type Sealer interface {
	Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error)
	Open(ctx context.Context, sealed, aad []byte) ([]byte, error)
}

// ErrNotFound is what Blobs returns for a Secret that is not there, and ErrConflict
// for one that changed (or went) since it was read.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("changed meanwhile")
)

// Blobs keeps sealed values in Secrets of one namespace, one Secret each. The caller
// seals; Blobs stores bytes and metadata. Its client must read Secrets straight from the
// API server (the manager's cache holds Secret metadata only).
type Blobs struct {
	// Client reads and writes the Secrets.
	Client client.Client
	// Namespace is where they live: the manager's own.
	Namespace string
}

// Blob is one stored value and its metadata.
type Blob struct {
	// Name is the Secret's name.
	Name string
	// Labels and Annotations are the Secret's (this package's only).
	Labels, Annotations map[string]string
	// Sealed is the sealed value; nil in List's answers.
	Sealed []byte
	// Version is the Secret's resourceVersion, for Update and Delete preconditions.
	Version string
	// UID is the Secret's UID.
	UID string
	// Created is when the Secret was created.
	Created time.Time
}

// Digest is a hex SHA-256 of the parts, each length-prefixed, cut to 40 characters: a
// Secret name's or a label value's worth.
func Digest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:40]
}

func (b *Blobs) secret(bl Blob, kind string) *corev1.Secret {
	labels := map[string]string{LabelManagedBy: managedBy, LabelKind: kind}
	for k, v := range bl.Labels {
		labels[k] = v
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bl.Name, Namespace: b.Namespace, Labels: labels, Annotations: bl.Annotations, ResourceVersion: bl.Version},
		Type:       secretType,
		Data:       map[string][]byte{dataKey: bl.Sealed},
	}
}

// Create stores bl as a new Secret of kind; ErrConflict when one of that name exists.
func (b *Blobs) Create(ctx context.Context, kind string, bl Blob) error {
	err := b.Client.Create(ctx, b.secret(bl, kind))
	if apierrors.IsAlreadyExists(err) {
		return ErrConflict
	}
	return apiError("creating", err)
}

// Put stores bl as the Secret of its name, creating or replacing it.
func (b *Blobs) Put(ctx context.Context, kind string, bl Blob) error {
	bl.Version = ""
	s := b.secret(bl, kind)
	err := b.Client.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		return apiError("creating", err)
	}
	var cur corev1.Secret
	if err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: bl.Name}, &cur); err != nil {
		return apiError("reading", err)
	}
	s.ResourceVersion = cur.ResourceVersion
	return apiError("updating", b.Client.Update(ctx, s))
}

// Update replaces the Secret of bl.Name if it is still at bl.Version: ErrConflict when
// it changed or went meanwhile.
func (b *Blobs) Update(ctx context.Context, kind string, bl Blob) error {
	err := b.Client.Update(ctx, b.secret(bl, kind))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return ErrConflict
	}
	return apiError("updating", err)
}

// Get returns the Secret of name, if it is of kind; ErrNotFound otherwise.
func (b *Blobs) Get(ctx context.Context, kind, name string) (*Blob, error) {
	var s corev1.Secret
	if err := b.Client.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, ErrNotFound
		}
		return nil, apiError("reading", err)
	}
	if s.Type != secretType || s.Labels[LabelKind] != kind {
		return nil, ErrNotFound
	}
	return blobOf(&s, true), nil
}

// Delete removes the Secret of name; with version, only if it is still at that
// version (ErrConflict otherwise), so that of two replicas consuming one value only
// one succeeds. A Secret that is not there is ErrNotFound.
func (b *Blobs) Delete(ctx context.Context, name, version string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: b.Namespace}}
	var opts []client.DeleteOption
	if version != "" {
		opts = append(opts, client.Preconditions{ResourceVersion: &version})
	}
	err := b.Client.Delete(ctx, s, opts...)
	switch {
	case apierrors.IsNotFound(err):
		return ErrNotFound
	case apierrors.IsConflict(err):
		return ErrConflict
	}
	return apiError("deleting", err)
}

// List returns the Secrets of kind with the given labels, without their values.
func (b *Blobs) List(ctx context.Context, kind string, labels map[string]string) ([]Blob, error) {
	sel := client.MatchingLabels{LabelManagedBy: managedBy, LabelKind: kind}
	for k, v := range labels {
		sel[k] = v
	}
	var list corev1.SecretList
	if err := b.Client.List(ctx, &list, client.InNamespace(b.Namespace), sel); err != nil {
		return nil, apiError("listing", err)
	}
	out := make([]Blob, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Type == secretType {
			out = append(out, *blobOf(&list.Items[i], false))
		}
	}
	return out, nil
}

func blobOf(s *corev1.Secret, withValue bool) *Blob {
	bl := &Blob{Name: s.Name, Labels: s.Labels, Annotations: s.Annotations, Version: s.ResourceVersion,
		UID: string(s.UID), Created: s.CreationTimestamp.Time}
	if withValue {
		bl.Sealed = s.Data[dataKey]
	}
	return bl
}

// apiError wraps an API server error with what was being done; the API server's
// errors name objects, never Secret data.
func apiError(doing string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s a Secret: %w", doing, err)
}
