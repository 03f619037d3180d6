package kubetest

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// serviceAccountKeyBits is the size of the service account signing key: 2048 bits is what kubeadm generates, and
// it takes a fraction of a second.
const serviceAccountKeyBits = 2048

// writeServiceAccountKeys generates the RSA key pair kube-apiserver signs and verifies service account tokens
// with: the private key as PKCS #1 PEM at private (mode 0600), the public key as PKIX PEM at public.
func writeServiceAccountKeys(private, public string) error {
	key, err := rsa.GenerateKey(rand.Reader, serviceAccountKeyBits)
	if err != nil {
		return fmt.Errorf("generating the service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding the service account public key: %w", err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(private, priv, 0o600); err != nil {
		return fmt.Errorf("writing the service account key: %w", err)
	}
	if err := os.WriteFile(public, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644); err != nil {
		return fmt.Errorf("writing the service account public key: %w", err)
	}
	return nil
}
