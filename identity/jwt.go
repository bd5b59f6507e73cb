package identity

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-json-experiment/json/jsontext"
)

// joseAlgorithms are signingAlgorithms as go-jose names them.
var joseAlgorithms = func() []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(signingAlgorithms))
	for i, a := range signingAlgorithms {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}()

// parseJWS parses a compact JWS signed with one of the accepted algorithms, verifying
// nothing.
func parseJWS(token string) (*jose.JSONWebSignature, error) {
	jws, err := jose.ParseSigned(token, joseAlgorithms)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errMultipleSignatures
	}
	return jws, nil
}

type constError string

func (e constError) Error() string { return string(e) }

const errMultipleSignatures = constError("a JWT must carry exactly one signature")

// usableKey reports whether raw is a public signing key a JWT can be verified with.
func usableKey(raw jsontext.Value) bool {
	var k jose.JSONWebKey
	if err := k.UnmarshalJSON(raw); err != nil || !k.Valid() || (k.Use != "" && k.Use != "sig") {
		return false
	}
	switch k.Key.(type) {
	case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
		return true
	}
	return false
}
