// Package usergrants keeps what per-person authorization (spec.http.auth.oauth2.perUser)
// must share between the manager's replicas, encrypted: persons' grants (the tokens an
// MCP server's authorization server issued them, connector.GrantStore) and the
// authorizations in flight (the gateway broker's pending flows), each in a Kubernetes
// Secret of the manager's namespace, sealed with AES-256-GCM under a key from a Secret
// a cluster admin names.
//
// Every sealed value is bound, as AEAD additional data, to what it is stored under (a
// grant to its caller and server, a flow to its id), so a value copied under another
// name does not open. Keys rotate: the newest key seals, every key of the Secret opens,
// and the key's id is in each sealed value's header.
//
// It must not import the gateway or the controllers; it never logs, and its errors never
// carry a token, a key or a sealed value.
package usergrants

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sealVersion is the first byte of every sealed value.
const sealVersion = 1

// keyIDPattern is what a key id (a data key of the key Secret) must look like.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ErrNotSealedForThis is what Open returns for a value that does not open: tampered,
// sealed for another name, or sealed with a key the keyring no longer holds.
var ErrNotSealedForThis = errors.New("sealed value does not open")

// Keyring holds AES-256-GCM keys by id; the newest (the id that sorts last) seals.
type Keyring struct {
	keys   map[string]cipher.AEAD
	newest string
}

// NewKeyring reads keys from a Secret's data: each data key is a key id (letters,
// digits, '.', '_', '-', at most 64), its value 32 random bytes, raw or base64. The
// newest key, the one that seals, is the id that sorts last as a string: name keys by
// date (2026-01-15) or by a zero-padded counter. Errors name key ids, never values.
func NewKeyring(data map[string][]byte) (*Keyring, error) {
	k := &Keyring{keys: make(map[string]cipher.AEAD, len(data))}
	for id, raw := range data {
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("key id %q is not 1 to 64 letters, digits, '.', '_' or '-'", truncate(id, 64))
		}
		key, ok := keyBytes(raw)
		if !ok {
			return nil, fmt.Errorf("key %q is not 32 bytes, raw or base64", id)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		k.keys[id] = aead
		if id > k.newest {
			k.newest = id
		}
	}
	if len(k.keys) == 0 {
		return nil, errors.New("the key Secret holds no key")
	}
	return k, nil
}

// keyBytes returns the 32 key bytes of raw: raw itself, or its base64 decoding.
func keyBytes(raw []byte) ([]byte, bool) {
	if len(raw) == 32 {
		return raw, true
	}
	s := strings.TrimSpace(string(raw))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, true
		}
	}
	return nil, false
}

// Newest returns the id of the key that seals.
func (k *Keyring) Newest() string { return k.newest }

// Seal encrypts plaintext with the newest key, bound to aad. The result is the header
// (version, key id), a random nonce and the ciphertext; the header is authenticated too.
func (k *Keyring) Seal(plaintext, aad []byte) ([]byte, error) {
	aead := k.keys[k.newest]
	header := append([]byte{sealVersion, byte(len(k.newest))}, k.newest...) //nolint:gosec // key ids are at most 64 bytes (keyIDPattern)
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("reading a nonce: %w", err)
	}
	out := slices.Concat(header, nonce)
	return aead.Seal(out, nonce, plaintext, slices.Concat(header, aad)), nil
}

// KeyID returns the id of the key sealed was sealed with.
func KeyID(sealed []byte) (string, bool) {
	if len(sealed) < 2 || sealed[0] != sealVersion || len(sealed) < 2+int(sealed[1]) {
		return "", false
	}
	return string(sealed[2 : 2+int(sealed[1])]), true
}

// Open decrypts sealed, which must have been sealed for aad with one of the keyring's
// keys; anything else is ErrNotSealedForThis.
func (k *Keyring) Open(sealed, aad []byte) ([]byte, error) {
	id, ok := KeyID(sealed)
	if !ok {
		return nil, ErrNotSealedForThis
	}
	aead, ok := k.keys[id]
	if !ok {
		return nil, fmt.Errorf("%w: it was sealed with key %q, which the key Secret no longer holds", ErrNotSealedForThis, id)
	}
	header := sealed[:2+len(id)]
	rest := sealed[len(header):]
	if len(rest) < aead.NonceSize()+aead.Overhead() {
		return nil, ErrNotSealedForThis
	}
	plain, err := aead.Open(nil, rest[:aead.NonceSize()], rest[aead.NonceSize():], slices.Concat(header, aad))
	if err != nil {
		return nil, ErrNotSealedForThis
	}
	return plain, nil
}

// SecretKeys is the keyring of a Secret a cluster admin names (the manager's
// --user-grants-key-secret), read straight from the API server and again at most every
// TTL, or at once when a value sealed with a key it does not hold is opened: a key
// added to the Secret seals on every replica within TTL, and one removed stops opening.
type SecretKeys struct {
	// Reader reads the Secret; it must not be a cache that drops Secret data.
	Reader client.Reader
	// Secret names the key Secret.
	Secret types.NamespacedName
	// TTL is how long a keyring read is used; zero means a minute.
	TTL time.Duration

	mu     sync.Mutex
	ring   *Keyring
	readAt time.Time
}

// Keyring returns the keyring, reading the Secret when the last read is older than TTL.
func (s *SecretKeys) Keyring(ctx context.Context) (*Keyring, error) {
	return s.keyring(ctx, false)
}

func (s *SecretKeys) keyring(ctx context.Context, fresh bool) (*Keyring, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl := s.TTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	if s.ring != nil && !fresh && time.Since(s.readAt) < ttl {
		return s.ring, nil
	}
	var sec corev1.Secret
	if err := s.Reader.Get(ctx, s.Secret, &sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("the grants' key Secret %s does not exist", s.Secret)
		}
		return nil, fmt.Errorf("reading the grants' key Secret %s: %w", s.Secret, err)
	}
	ring, err := NewKeyring(sec.Data)
	if err != nil {
		return nil, fmt.Errorf("the grants' key Secret %s: %w", s.Secret, err)
	}
	s.ring, s.readAt = ring, time.Now()
	return ring, nil
}

// Seal seals plaintext for aad with the newest key.
func (s *SecretKeys) Seal(ctx context.Context, plaintext, aad []byte) ([]byte, error) {
	ring, err := s.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	return ring.Seal(plaintext, aad)
}

// Open opens sealed for aad, reading the Secret again first when sealed names a key
// the keyring does not hold (a key added on another replica's behalf).
func (s *SecretKeys) Open(ctx context.Context, sealed, aad []byte) ([]byte, error) {
	ring, err := s.Keyring(ctx)
	if err != nil {
		return nil, err
	}
	if id, ok := KeyID(sealed); ok {
		if _, held := ring.keys[id]; !held {
			if ring, err = s.keyring(ctx, true); err != nil {
				return nil, err
			}
		}
	}
	return ring.Open(sealed, aad)
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
