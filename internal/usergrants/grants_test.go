package usergrants_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/usergrants"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

var k8sClient client.Client

func TestMain(m *testing.M) {
	var env *testenv.Environment
	os.Exit(testenv.Main(m, &env, &k8sClient))
}

// newNamespace creates a namespace for one test: the manager's, where grants live.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "grants-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// randomKey returns 32 random bytes.
func randomKey(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// newStore returns a store in a new namespace, keyed by a key Secret holding keys.
func newStore(t *testing.T, keys map[string][]byte) (*usergrants.Store, *usergrants.SecretKeys, string) {
	t.Helper()
	ns := newNamespace(t)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "grant-keys", Namespace: ns}, Data: keys}
	if err := k8sClient.Create(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	sk := &usergrants.SecretKeys{Reader: k8sClient, Secret: types.NamespacedName{Namespace: ns, Name: "grant-keys"}}
	return &usergrants.Store{Blobs: &usergrants.Blobs{Client: k8sClient, Namespace: ns}, Keys: sk}, sk, ns
}

var (
	alice = connector.GrantKey{Caller: "key-of-alice", Server: connector.Key{Namespace: "team-a", Name: "github"}}
	bob   = connector.GrantKey{Caller: "key-of-bob", Server: connector.Key{Namespace: "team-a", Name: "github"}}
)

func grantOf(k connector.GrantKey, user string) *connector.Grant {
	return &connector.Grant{
		Key: k, Username: user, Issuer: "https://as.example.com",
		AccessToken: "access-token-of-" + user + "-4f1c9e2b7a", RefreshToken: "refresh-token-of-" + user + "-8d3b0a6c15",
		Expiry: time.Now().Add(time.Hour).Truncate(time.Second), Updated: time.Now().Truncate(time.Second),
	}
}

func TestGrantRoundTripIsCiphertextAtRest(t *testing.T) {
	ctx := context.Background()
	store, _, ns := newStore(t, map[string][]byte{"2026-01": randomKey(t)})
	g := grantOf(alice, "oidc:alice@example.com")
	if err := store.SaveGrant(ctx, g); err != nil {
		t.Fatal(err)
	}
	got, err := store.LoadGrant(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if got.AccessToken != g.AccessToken || got.RefreshToken != g.RefreshToken || !got.Expiry.Equal(g.Expiry) || got.Issuer != g.Issuer || got.Username != g.Username {
		t.Fatalf("loaded %+v, stored %+v: fields differ", got, g)
	}
	if _, err := store.LoadGrant(ctx, bob); !errors.Is(err, connector.ErrNoGrant) {
		t.Fatalf("bob's grant: %v, want ErrNoGrant", err)
	}

	// What the API server holds: ciphertext, and names only in the metadata.
	var sec corev1.Secret
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: usergrants.GrantSecretName(alice)}, &sec); err != nil {
		t.Fatal(err)
	}
	whole := sec.String()
	for _, secret := range []string{g.AccessToken, g.RefreshToken, "access-token", "refresh-token", alice.Caller} {
		if strings.Contains(whole, secret) {
			t.Errorf("the stored Secret holds %q in the clear", secret)
		}
		for _, v := range sec.Data {
			if bytes.Contains(v, []byte(secret)) {
				t.Errorf("the stored Secret's data holds %q in the clear", secret)
			}
		}
	}
	// Printing or logging a grant shows no token.
	for _, s := range []string{g.String(), strings.TrimSpace(strings.Join([]string{g.LogValue().String()}, ""))} {
		if strings.Contains(s, g.AccessToken) || strings.Contains(s, g.RefreshToken) {
			t.Errorf("a printed grant shows a token: %s", s)
		}
	}

	infos, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Username != "oidc:alice@example.com" || infos[0].Server != "team-a/github" {
		t.Fatalf("admin list = %+v, want alice's grant for team-a/github", infos)
	}

	if err := store.DeleteGrant(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := store.LoadGrant(ctx, alice); !errors.Is(err, connector.ErrNoGrant) {
		t.Fatalf("after revocation: %v, want ErrNoGrant", err)
	}
	if err := store.DeleteGrant(ctx, alice); err != nil {
		t.Fatalf("deleting a grant that is gone: %v", err)
	}
}

func TestGrantKeyRotation(t *testing.T) {
	ctx := context.Background()
	oldKey, newKey := randomKey(t), randomKey(t)
	store, keys, ns := newStore(t, map[string][]byte{"2026-01": oldKey})
	if err := store.SaveGrant(ctx, grantOf(alice, "alice")); err != nil {
		t.Fatal(err)
	}

	// The admin adds a newer key: the old grant still opens, new ones are sealed with
	// the newest key.
	var sec corev1.Secret
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "grant-keys"}, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["2026-06"] = newKey
	if err := k8sClient.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	keys.TTL = time.Nanosecond // read the Secret again at once
	if _, err := store.LoadGrant(ctx, alice); err != nil {
		t.Fatalf("a grant sealed with the older key: %v", err)
	}
	if err := store.SaveGrant(ctx, grantOf(bob, "bob")); err != nil {
		t.Fatal(err)
	}
	if id := keyIDOf(t, ns, bob); id != "2026-06" {
		t.Fatalf("bob's grant sealed with key %q, want the newest 2026-06", id)
	}
	if id := keyIDOf(t, ns, alice); id != "2026-01" {
		t.Fatalf("alice's grant sealed with key %q, want 2026-01 until it is written again", id)
	}

	// The old key removed: what it sealed no longer opens, what the new one sealed does.
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "grant-keys"}, &sec); err != nil {
		t.Fatal(err)
	}
	delete(sec.Data, "2026-01")
	if err := k8sClient.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	if _, err := store.LoadGrant(ctx, alice); !errors.Is(err, connector.ErrNoGrant) || !strings.Contains(err.Error(), `key "2026-01"`) {
		t.Fatalf("a grant sealed with a removed key: %v, want ErrNoGrant naming the key", err)
	}
	if _, err := store.LoadGrant(ctx, bob); err != nil {
		t.Fatalf("a grant sealed with the remaining key: %v", err)
	}
}

func keyIDOf(t *testing.T, ns string, k connector.GrantKey) string {
	t.Helper()
	var sec corev1.Secret
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: usergrants.GrantSecretName(k)}, &sec); err != nil {
		t.Fatal(err)
	}
	for _, v := range sec.Data {
		id, ok := usergrants.KeyID(v)
		if !ok {
			t.Fatal("the stored value has no key header")
		}
		return id
	}
	t.Fatal("the Secret holds no data")
	return ""
}

func TestGrantCopiedOrTamperedDoesNotOpen(t *testing.T) {
	ctx := context.Background()
	store, _, ns := newStore(t, map[string][]byte{"k1": randomKey(t)})
	if err := store.SaveGrant(ctx, grantOf(alice, "alice")); err != nil {
		t.Fatal(err)
	}
	var sec corev1.Secret
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: usergrants.GrantSecretName(alice)}, &sec); err != nil {
		t.Fatal(err)
	}

	// Someone who may write Secrets there copies alice's grant under bob's name.
	cp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: usergrants.GrantSecretName(bob), Namespace: ns, Labels: sec.Labels, Annotations: sec.Annotations}, Type: sec.Type, Data: sec.Data}
	if err := k8sClient.Create(ctx, cp); err != nil {
		t.Fatal(err)
	}
	if g, err := store.LoadGrant(ctx, bob); !errors.Is(err, connector.ErrNoGrant) {
		t.Fatalf("alice's grant copied under bob's name: %v %v, want ErrNoGrant", g, err)
	}

	// A flipped bit anywhere (header, nonce, ciphertext, tag) does not open either.
	for _, at := range []int{1, 5, len(sec.Data["sealed"]) / 2, len(sec.Data["sealed"]) - 1} {
		bad := bytes.Clone(sec.Data["sealed"])
		bad[at] ^= 1
		sec.Data["sealed"] = bad
		if err := k8sClient.Update(ctx, &sec); err != nil {
			t.Fatal(err)
		}
		if g, err := store.LoadGrant(ctx, alice); !errors.Is(err, connector.ErrNoGrant) {
			t.Fatalf("a grant with byte %d flipped: %v %v, want ErrNoGrant", at, g, err)
		} else if strings.Contains(err.Error(), "access-token") {
			t.Fatalf("the error shows a token: %v", err)
		}
		bad[at] ^= 1
	}
}

func TestKeyringRefusesBadKeys(t *testing.T) {
	for name, data := range map[string]map[string][]byte{
		"no key":            {},
		"a short key":       {"k1": []byte("too short")},
		"a key id with a /": {"a/b": make([]byte, 32)},
	} {
		if _, err := usergrants.NewKeyring(data); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "too short") {
			t.Errorf("%s: the error shows the key's value: %v", name, err)
		}
	}
	// Base64 of 32 bytes works as well as the raw bytes (openssl rand -base64 32).
	if _, err := usergrants.NewKeyring(map[string][]byte{"k1": []byte("q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80=\n")}); err != nil {
		t.Fatalf("a base64 key: %v", err)
	}
}
