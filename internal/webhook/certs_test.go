package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// syncBuffer is a log destination safe for the goroutine of Run and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the log lines with msg.
func (s *syncBuffer) lines(msg string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, `msg="`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// Run logs a failure once while it lasts, with the count at its end (a deleted file is not logged every second);
// a served certificate that expires, or is not valid yet, is a warning and fails /readyz with the reason.
func TestCertFilesRunLogs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ca, err := testpki.NewCA("test")
		if err != nil {
			t.Fatal(err)
		}
		leaf := func(notBefore, notAfter time.Time) testpki.Leaf {
			l, err := ca.LeafValid(notBefore, notAfter, []net.IP{net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		dir := t.TempDir()
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		write := func(l testpki.Leaf) {
			t.Helper()
			if err := os.WriteFile(certFile, l.CertPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var log syncBuffer
		c := NewCertFiles(certFile, keyFile, slog.New(slog.NewTextHandler(&log, nil)))
		ready := func() (int, string) {
			t.Helper()
			rec := httptest.NewRecorder()
			HealthMux(c.Err, prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			return rec.Code, rec.Body.String()
		}
		now := time.Now()
		write(leaf(now.Add(-time.Hour), now.Add(10*time.Second)))
		if _, err := c.Check(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx, time.Second)

		// The certificate file deleted for five checks, then back.
		if err := os.Remove(certFile); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Second + time.Second/2)
		synctest.Wait()
		if got := log.lines("serving certificate not reloaded; the previous one is still served (logged once while it lasts)"); len(got) != 1 {
			t.Errorf("a deleted certificate file for 5 checks logged %d times, want once: %q", len(got), got)
		}
		if code, body := ready(); code != 200 {
			t.Errorf("/readyz with the previous certificate still valid = %d %q, want 200", code, body)
		}
		write(leaf(now.Add(-time.Hour), now.Add(10*time.Second)))
		time.Sleep(time.Second)
		synctest.Wait()
		if got := log.lines("serving certificate files readable again"); len(got) != 1 || !strings.Contains(got[0], "failed_checks=5") {
			t.Errorf("recovery logged %q, want once with failed_checks=5", got)
		}

		// It expires at 10s: a warning (once), and /readyz fails with the reason.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := log.lines("serving certificate not valid; /readyz fails until a valid one is served")
		if len(got) != 1 || !strings.Contains(got[0], "expired at") {
			t.Errorf("expiry logged %q, want one warning saying it expired", got)
		}
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "the serving certificate expired at") {
			t.Errorf("/readyz with an expired certificate = %d %q, want 503 saying it expired", code, body)
		}

		// A certificate not valid yet: the same, with its reason; then a valid one makes it ready again.
		write(leaf(time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)))
		time.Sleep(time.Second)
		synctest.Wait()
		if code, body := ready(); code != http.StatusServiceUnavailable || !strings.Contains(body, "not valid before") {
			t.Errorf("/readyz with a certificate not valid yet = %d %q, want 503 saying so", code, body)
		}
		if got := log.lines("serving certificate not valid; /readyz fails until a valid one is served"); len(got) != 2 {
			t.Errorf("not valid yet logged %q, want a second warning", got)
		}
		write(leaf(time.Now().Add(-time.Hour), time.Now().Add(time.Hour)))
		time.Sleep(time.Second)
		synctest.Wait()
		if code, body := ready(); code != 200 {
			t.Errorf("/readyz with a valid certificate again = %d %q, want 200", code, body)
		}
		if got := log.lines("serving certificate valid again"); len(got) != 1 {
			t.Errorf("valid again logged %q, want once", got)
		}
		cancel()
	})
}

// TestCertExpiry: the gauge is 0 before a certificate loads, then the served one's expiry, and follows a
// rotation at the next scrape.
func TestCertExpiry(t *testing.T) {
	ca, err := testpki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c := NewCertFiles(certFile, keyFile, slog.New(slog.DiscardHandler))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(CertExpiry(c))
	gauge := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(mfs) != 1 || mfs[0].GetName() != CertExpiryMetric || len(mfs[0].Metric) != 1 {
			t.Fatalf("gathered %v, want one %s", mfs, CertExpiryMetric)
		}
		return mfs[0].Metric[0].GetGauge().GetValue()
	}
	if got := gauge(); got != 0 {
		t.Errorf("before a certificate loads: %v, want 0", got)
	}
	now := time.Now().Truncate(time.Second)
	for _, days := range []int{30, 90} {
		notAfter := now.Add(time.Duration(days) * 24 * time.Hour)
		l, err := ca.LeafValid(now.Add(-time.Hour), notAfter, []net.IP{net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, l.CertPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, l.KeyPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Check(); err != nil {
			t.Fatal(err)
		}
		if got, want := gauge(), float64(notAfter.Unix()); got != want {
			t.Errorf("a certificate valid %d days: %v, want %v", days, got, want)
		}
	}
}
