package kubecli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// TestWebhookCommand: `webhook` serves AdmissionReviews over TLS with the settings flags applied, reports on its
// health port, and exits 0 when its context ends. (test/kube runs it behind a real API server.)
func TestWebhookCommand(t *testing.T) {
	ca, err := testpki.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf([]net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, b := range map[string][]byte{certFile: leaf.CertPEM, keyFile: leaf.KeyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan map[string]any, 1)
	logs := &logWatch{found: started}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"webhook", "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0",
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--image", "example.com/sm:v1", "--mode", "sidecar"}, nil, io.Discard, logs)
	}()
	var listen, health string
	select {
	case rec := <-started:
		listen, health = rec["listen"].(string), rec["health_listen"].(string)
	case code := <-done:
		t.Fatalf("webhook exited with %d before serving: %s", code, logs.String())
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	pod, _ := json.Marshal(corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "envoy"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "envoy", Image: "envoyproxy/envoy:v1.40.0"}}},
	})
	body, _ := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "uid-1", Namespace: "apps", Operation: admissionv1.Create,
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Object: runtime.RawExtension{Raw: pod}},
	})
	resp, err := client.Post("https://"+listen+webhook.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var review admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&review)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || review.Response == nil || !review.Response.Allowed || review.Response.UID != "uid-1" {
		t.Fatalf("answer %s %+v (%v); want 200, allowed, uid-1", resp.Status, review.Response, err)
	}
	for _, want := range []string{`"mode":"sidecar"`, "example.com/sm:v1"} {
		if !strings.Contains(string(review.Response.Patch), strings.ReplaceAll(want, `"`, `\"`)) && !strings.Contains(string(review.Response.Patch), want) {
			t.Errorf("patch does not carry %s: %s", want, review.Response.Patch)
		}
	}

	get := func(path string) string {
		resp, err := http.Get("http://" + health + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
		return string(b)
	}
	get("/healthz")
	get("/readyz")
	if m := get("/metrics"); !strings.Contains(m, `shutdown_manager_webhook_requests_total{outcome="injected"} 1`) {
		t.Errorf("/metrics does not count the injection:\n%s", m)
	}

	cancel()
	if code := <-done; code != ExitOK {
		t.Errorf("exit %d after the context ended, want 0; log:\n%s", code, logs.String())
	}
}

// logWatch keeps the log and sends the "webhook serving" record on found.
type logWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	found chan map[string]any
	sent  bool
}

func (l *logWatch) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.sent && bytes.Contains(p, []byte(`"msg":"webhook serving"`)) {
		var rec map[string]any
		if json.Unmarshal(p, &rec) == nil {
			l.found <- rec
			l.sent = true
		}
	}
	return l.buf.Write(p)
}

func (l *logWatch) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
