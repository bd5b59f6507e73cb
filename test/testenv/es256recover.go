package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"math/big"
	"strings"
)

// RecoverES256Keys returns the P-256 public keys that verify the signature of an ES256
// JWT, recovered from the signature itself (ECDSA public key recovery: Q = r⁻¹(sR − zG)
// for each of the two points R whose x is r). One of them is the signer's; no one holds
// the private key of the other, so a key set of both admits the tokens of that signer
// alone.
//
// It exists for an issuer that signs tokens with a key it publishes nowhere: the MCP
// conformance suite's enterprise-managed authorization scenario (0.2.0-alpha.12) hands
// out an ID token of an identity provider whose discovery document names a jwks_uri the
// scenario does not serve. A test that must verify that token as a gateway would serves
// the recovered keys itself.
func RecoverES256Keys(jwt string) ([]*ecdsa.PublicKey, error) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a compact JWT")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return nil, errors.New("not an ES256 signature")
	}
	curve := elliptic.P256()
	params := curve.Params()
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	z := new(big.Int).Mod(new(big.Int).SetBytes(digest[:]), params.N)
	rInverse := new(big.Int).ModInverse(r, params.N)
	if rInverse == nil {
		return nil, errors.New("not an ES256 signature")
	}
	// −zG, as a point: the curve's Add takes no scalars.
	zGx, zGy := curve.ScalarBaseMult(z.FillBytes(make([]byte, 32))) //nolint:staticcheck // the low-level point arithmetic recovery needs; a test helper only
	minusZGy := new(big.Int).Sub(params.P, zGy)

	var keys []*ecdsa.PublicKey
	for _, parity := range []byte{2, 3} {
		compressed := append([]byte{parity}, r.FillBytes(make([]byte, 32))...)
		rx, ry := elliptic.UnmarshalCompressed(curve, compressed)
		if rx == nil {
			continue
		}
		sRx, sRy := curve.ScalarMult(rx, ry, s.Bytes())                     //nolint:staticcheck // as above
		x, y := curve.Add(sRx, sRy, zGx, minusZGy)                          //nolint:staticcheck // as above
		x, y = curve.ScalarMult(x, y, rInverse.FillBytes(make([]byte, 32))) //nolint:staticcheck // as above
		uncompressed := append(append([]byte{4}, x.FillBytes(make([]byte, 32))...), y.FillBytes(make([]byte, 32))...)
		key, err := ecdsa.ParseUncompressedPublicKey(curve, uncompressed)
		if err != nil {
			continue
		}
		if ecdsa.Verify(key, digest[:], r, s) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no P-256 key verifies the signature")
	}
	return keys, nil
}
