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

	mu              sync.Mutex // held by Check
	certPEM, keyPEM []byte     // what the served certificate was loaded from
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
		return false, fmt.Errorf("loading the certificate and key from %s and %s: %w", c.certFile, c.keyFile, err)
	}
	c.cert.Store(&cert)
	c.certPEM, c.keyPEM = certPEM, keyPEM
	return true, nil
}

// Run calls Check every interval until ctx ends, logging each new pair, each failure and each change of the
// served certificate's validity. A failure is logged once while it lasts (a deleted file, a bad pair: not
// every interval), and its end says how many checks it lasted. A certificate outside its validity (expired, or
// not valid yet) is still served, since a client may not check the time, but it is a warning and /readyz fails
// (see Err): with failurePolicy Ignore, the API server's failed calls would otherwise admit pods uninjected
// while everything looks well.
func (c *CertFiles) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var (
		failure  string // the error being repeated, "" while checks succeed
		failures int
		invalid  string // why the served certificate is not valid now, "" while it is
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := c.Check()
		switch {
		case err != nil && err.Error() == failure:
			failures++
		case err != nil:
			if failure != "" {
				c.log.Warn("serving certificate still not reloaded", "failed_checks", failures, "err", failure)
			}
			failure, failures = err.Error(), 1
			c.log.Warn("serving certificate not reloaded; the previous one is still served (logged once while it lasts)", "err", err)
		case failure != "":
			c.log.Info("serving certificate files readable again", "failed_checks", failures)
			failure, failures = "", 0
		}
		if changed {
			c.log.Info("serving certificate reloaded", "cert_file", c.certFile, "not_after", c.NotAfter())
		}
		if now := c.validity(time.Now()); now != invalid {
			if now != "" {
				c.log.Warn("serving certificate not valid; /readyz fails until a valid one is served", "cert_file", c.certFile, "err", now)
			} else {
				c.log.Info("serving certificate valid again", "cert_file", c.certFile, "not_after", c.NotAfter())
			}
			invalid = now
		}
	}
}

// validity says why the served certificate is not valid at now, or "" when it is (or none is loaded).
func (c *CertFiles) validity(now time.Time) string {
	cert := c.cert.Load()
	if cert == nil || cert.Leaf == nil {
		return ""
	}
	switch l := cert.Leaf; {
	case now.After(l.NotAfter):
		return "the serving certificate expired at " + l.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(l.NotBefore):
		return "the serving certificate is not valid before " + l.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

// GetCertificate serves the current pair; it fits tls.Config.GetCertificate.
func (c *CertFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert := c.cert.Load()
	if cert == nil {
		return nil, errors.New("no serving certificate loaded yet")
	}
	return cert, nil
}

// Err says why the webhook is not ready (its /readyz): no certificate loaded yet, or the served one expired or
// not valid yet. Nil when a certificate valid now is served.
func (c *CertFiles) Err() error {
	if c.cert.Load() == nil {
		return errors.New("no serving certificate loaded yet")
	}
	if why := c.validity(time.Now()); why != "" {
		return errors.New(why)
	}
	return nil
}

// Ready reports whether a certificate valid now is served (Err is nil).
func (c *CertFiles) Ready() bool { return c.Err() == nil }

// NotAfter is the served certificate's expiry (zero before one is loaded).
func (c *CertFiles) NotAfter() time.Time {
	if cert := c.cert.Load(); cert != nil && cert.Leaf != nil {
		return cert.Leaf.NotAfter
	}
	return time.Time{}
}
