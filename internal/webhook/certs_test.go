package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
)

// TestCertFilesReload: a new pair on disk is served after the next Check; a pair that does not load leaves the
// previous one served; nothing is served before the first good pair.
func TestCertFilesReload(t *testing.T) {
	ca, err := testpki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	leaf := func() testpki.Leaf {
		l, err := ca.Leaf([]net.IP{net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(cert, key []byte) {
		t.Helper()
		for path, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".tmp", path); err != nil { // how a Secret volume and cert-manager write
				t.Fatal(err)
			}
		}
	}

	c := NewCertFiles(certFile, keyFile, slog.New(slog.DiscardHandler))
	serial := func() string {
		t.Helper()
		cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			return "none"
		}
		x, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.SerialNumber.String()
	}
	first, second := leaf(), leaf()
	steps := []struct {
		name        string
		cert, key   []byte // nil: leave the files as they are
		wantChanged bool
		wantErr     bool
		wantSerial  string
		wantReady   bool
	}{
		{name: "missing files", wantErr: true, wantSerial: "none"},
		{name: "first pair", cert: first.CertPEM, key: first.KeyPEM, wantChanged: true, wantSerial: first.Serial.String(), wantReady: true},
		{name: "unchanged", wantSerial: first.Serial.String(), wantReady: true},
		{name: "key of another pair", cert: second.CertPEM, key: first.KeyPEM, wantErr: true, wantSerial: first.Serial.String(), wantReady: true},
		{name: "half-written certificate", cert: second.CertPEM[:40], key: second.KeyPEM, wantErr: true, wantSerial: first.Serial.String(), wantReady: true},
		{name: "second pair", cert: second.CertPEM, key: second.KeyPEM, wantChanged: true, wantSerial: second.Serial.String(), wantReady: true},
	}
	for _, s := range steps {
		if s.cert != nil {
			write(s.cert, s.key)
		}
		changed, err := c.Check()
		if changed != s.wantChanged || (err != nil) != s.wantErr {
			t.Errorf("%s: Check = %v, %v; want changed %v, error %v", s.name, changed, err, s.wantChanged, s.wantErr)
		}
		if got := serial(); got != s.wantSerial {
			t.Errorf("%s: serving serial %s, want %s", s.name, got, s.wantSerial)
		}
		if c.Ready() != s.wantReady {
			t.Errorf("%s: Ready = %v, want %v", s.name, c.Ready(), s.wantReady)
		}
	}
}
