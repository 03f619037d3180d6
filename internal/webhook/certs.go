package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultCertInterval is how often CertFiles.Run reads the files again. Reading two small files a second costs
// nothing measurable, and a rotated certificate is served within a second; a Secret volume itself is updated by
// kubelet only every minute or so.
const DefaultCertInterval = time.Second

// CertFiles serves the certificate and key of two PEM files and loads them again when their content changes
// (cert-manager, a Secret volume's atomic symlink swap, or a hand-copied pair), without a restart. A pair that
// does not load (a half-written file, a key that does not match) is reported and the previous pair served until a
// good one appears, so a rotation never fails a handshake. Safe for concurrent use.
type CertFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	cert atomic.Pointer[tls.Certificate]

	mu               sync.Mutex // held by Check
	certPEM, keyPEM  []byte     // what the served certificate was loaded from
	failedC, failedK []byte     // the last pair that did not load (reported once)
}

// NewCertFiles returns a CertFiles for the two files; nothing is loaded before the first Check.
func NewCertFiles(certFile, keyFile string, log *slog.Logger) *CertFiles {
	return &CertFiles{certFile: certFile, keyFile: keyFile, log: log}
}

// Check reads both files and, when they differ from the pair being served, loads them. It reports whether a new
// pair is now served. The error says why the files could not be read or loaded; the previous pair, if any, is
// still served.
func (c *CertFiles) Check() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	certPEM, err := os.ReadFile(c.certFile)
	if err != nil {
		return false, fmt.Errorf("reading the certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(c.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading the key: %w", err)
	}
	if bytes.Equal(certPEM, c.certPEM) && bytes.Equal(keyPEM, c.keyPEM) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		c.failedC, c.failedK = certPEM, keyPEM
		return false, fmt.Errorf("loading the certificate and key from %s and %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert.Store(&cert)
	c.certPEM, c.keyPEM = certPEM, keyPEM
	c.failedC, c.failedK = nil, nil
	return true, nil
}

// Run calls Check every interval until ctx ends, logging each new pair and each failure (a failure once per
// distinct content of the files, not every interval).
func (c *CertFiles) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		lastFailedC, lastFailedK := c.failedC, c.failedK
		c.mu.Unlock()
		changed, err := c.Check()
		switch {
		case changed:
			c.log.Info("serving certificate reloaded", "cert_file", c.certFile, "not_after", c.NotAfter())
		case err != nil && !c.sameFailure(lastFailedC, lastFailedK):
			c.log.Warn("serving certificate not reloaded; the previous one is still served", "err", err)
		}
	}
}

// sameFailure reports whether the pair that failed now is the one that failed before (nothing new to report).
func (c *CertFiles) sameFailure(certPEM, keyPEM []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failedC != nil && bytes.Equal(c.failedC, certPEM) && bytes.Equal(c.failedK, keyPEM)
}

// GetCertificate serves the current pair; it fits tls.Config.GetCertificate.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert := c.cert.Load()
	if cert == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return cert, nil
}

// Ready reports whether a certificate is loaded (the webhook's /readyz).
func (c *CertFiles) Ready() bool { return c.cert.Load() != nil }

// NotAfter is the served certificate's expiry (zero before one is loaded).
func (c *CertFiles) NotAfter() time.Time {
	if cert := c.cert.Load(); cert != nil && cert.Leaf != nil {
		return cert.Leaf.NotAfter
	}
	return time.Time{}
}
