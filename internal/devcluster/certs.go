package devcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is how long the certificates a control plane issues are valid: longer
// than any dev session.
const certValidity = 365 * 24 * time.Hour

// authority is a certificate authority held in memory: the serving CA that clients
// trust, or the client CA the API server trusts.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: commonName, Organization: []string{"switchboard-dev"}}, key)
	if err != nil {
		return nil, fmt.Errorf("creating the %s certificate: %w", commonName, err)
	}
	return &authority{cert: ca, key: key}, nil
}

// certPEM is the authority's certificate, PEM-encoded.
func (a *authority) certPEM() ([]byte, error) {
	return cert.EncodeCertificates(a.cert)
}

// issue signs a certificate for a new key with template's subject, names and extended
// key usage, and returns both PEM-encoded.
func (a *authority) issue(template *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	template.SerialNumber = serial
	now := time.Now()
	template.NotBefore = now.Add(-time.Minute).UTC()
	template.NotAfter = now.Add(certValidity).UTC()
	template.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing a certificate for %s: %w", template.Subject.CommonName, err)
	}
	issued, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = cert.EncodeCertificates(issued)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// servingCert issues the API server's certificate, for 127.0.0.1 and localhost.
func (a *authority) servingCert() (certPEM, keyPEM []byte, err error) {
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "localhost"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// clientCert issues a certificate the API server reads as user with its groups: the
// common name is the user name, each organization a group.
func (a *authority) clientCert(user User) (certPEM, keyPEM []byte, err error) {
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user.Name, Organization: user.Groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}
