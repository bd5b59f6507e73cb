package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

func TestRecoverES256KeysFindsTheSigner(t *testing.T) {
	for range 20 {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, nil)
		tok, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: "demo"}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		keys, err := RecoverES256Keys(tok)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, k := range keys {
			found = found || k.Equal(&key.PublicKey)
		}
		if !found {
			t.Fatalf("the signer's key is not among the %d recovered", len(keys))
		}
	}
}
