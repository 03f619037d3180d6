// Package testpki makes a throwaway certificate authority, serving certificates for tests and benchmarks of
// TLS servers (the webhook) and client certificates for a kube-apiserver's users: ECDSA P-256, in PEM, valid
// for a day. Never for production use.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority; PEM is its certificate, what a caBundle or a client's RootCAs takes.
type CA struct {
	PEM  []byte
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewCA makes a self-signed CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}, nil
}

// Leaf is a serving certificate signed by a CA.
type Leaf struct {
	CertPEM, KeyPEM []byte
	Serial          *big.Int
}

// Leaf makes a serving certificate for the IP addresses and DNS names, valid from an hour ago for a day.
func (ca *CA) Leaf(ips []net.IP, names ...string) (Leaf, error) {
	return ca.LeafValid(time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), ips, names...)
}

// LeafValid makes a serving certificate valid from notBefore to notAfter (an expired one, one not yet valid).
func (ca *CA) LeafValid(notBefore, notAfter time.Time, ips []net.IP, names ...string) (Leaf, error) {
	return ca.sign(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "serving"},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     names,
	})
}

// Client makes a client certificate for user in groups, valid from an hour ago for a day: the user and groups
// a kube-apiserver given the CA as --client-ca-file authenticates (the subject's CN and O).
func (ca *CA) Client(user string, groups ...string) (Leaf, error) {
	return ca.sign(&x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: user, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// sign makes a key and the certificate of tmpl for it, signed by ca.
func (ca *CA) sign(tmpl *x509.Certificate) (Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Leaf{}, fmt.Errorf("generating the key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Leaf{}, fmt.Errorf("signing the certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Leaf{}, err
	}
	return Leaf{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		Serial:  tmpl.SerialNumber,
	}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}
