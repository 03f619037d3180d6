// Command webhookload measures `shutdown-manager webhook` at a steady admission rate: the latency of each
// AdmissionReview as the API server would see it (over TLS on loopback, HTTP/2, one connection, like the API
// server's webhook client) and the webhook process's resident memory. Requests are sent open-loop, on a fixed
// schedule whatever the answers take, so a slow answer cannot lower the rate it is measured at. Each request
// carries the pod of deploy/plain/envoy.yaml's template (Envoy, not yet injected): every answer is a patch.
//
//	make build && go run ./bench/webhookload -manager bin/shutdown-manager -rate 500 -duration 20s -runs 3 \
//	    -out bench/results/webhook.json
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// Result is what the benchmark writes.
type Result struct {
	Date          string  `json:"date"`
	CPUs          int     `json:"cpus"`
	LoadAvgBefore string  `json:"loadavg_before"` // the machine is shared: its load says how to read the figures
	LoadAvgAfter  string  `json:"loadavg_after"`
	Rate          int     `json:"rate_per_second"`
	Protocol      string  `json:"protocol"`
	Duration      string  `json:"duration"`
	Requests      int     `json:"requests"`
	Failed        int     `json:"failed"` // transport errors, non-200 answers, answers without a patch
	P50ms         float64 `json:"p50_ms"`
	P90ms         float64 `json:"p90_ms"`
	P99ms         float64 `json:"p99_ms"`
	P999ms        float64 `json:"p99_9_ms"`
	MaxMs         float64 `json:"max_ms"`
	AchievedRate  float64 `json:"achieved_rate_per_second"`
	RSSIdleMiB    float64 `json:"rss_idle_mib"`         // VmRSS after start, before the load
	RSSMaxMiB     float64 `json:"rss_max_mib"`          // largest VmRSS sampled every 100 ms under load
	RSSPeakMiB    float64 `json:"rss_peak_mib"`         // VmHWM at the end: the kernel's own peak
	CPUSeconds    float64 `json:"cpu_seconds"`          // user+system of the webhook process during the load
	CPUPerReqMs   float64 `json:"cpu_ms_per_admission"` // CPUSeconds per request: what the rate costs, whatever the neighbours do
	FirstFailure  string  `json:"first_failure,omitempty"`
}

func main() {
	manager := flag.String("manager", "bin/shutdown-manager", "the shutdown-manager binary")
	rate := flag.Int("rate", 500, "admission requests per second")
	duration := flag.Duration("duration", 20*time.Second, "how long the load lasts")
	warmup := flag.Duration("warmup", 2*time.Second, "load at the same rate before measuring (connection, caches)")
	template := flag.String("pod", "deploy/plain/envoy.yaml", "a Deployment whose pod template is sent")
	out := flag.String("out", "", "write the result as JSON here too")
	runs := flag.Int("runs", 3, "how many runs (each with a fresh webhook process)")
	http1 := flag.Bool("http1", false, "HTTP/1.1 on several connections instead of HTTP/2 on one")
	flag.Parse()
	// Several runs, each with a fresh webhook: on a shared machine one run's tail says more about the neighbours
	// than about the webhook; the load averages recorded with each run say how busy the machine was.
	var results []Result
	failed := 0
	for range *runs {
		res, err := run(*manager, *template, *rate, *duration, *warmup, *http1)
		if err != nil {
			fmt.Fprintln(os.Stderr, "webhookload:", err)
			os.Exit(1)
		}
		failed += res.Failed
		results = append(results, res)
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	fmt.Println(string(b))
	if *out != "" {
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "webhookload:", err)
			os.Exit(1)
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

func run(manager, template string, rate int, duration, warmup time.Duration, http1 bool) (Result, error) {
	body, err := reviewBody(template)
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "webhookload-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	ca, err := testpki.NewCA("webhookload")
	if err != nil {
		return Result{}, err
	}
	leaf, err := ca.Leaf([]net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Result{}, err
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, leaf.CertPEM, 0o600); err != nil {
		return Result{}, err
	}
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o600); err != nil {
		return Result{}, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return Result{}, err
	}
	listen, health := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	logPath := filepath.Join(dir, "webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return Result{}, err
	}
	defer logFile.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, manager, "webhook", "--listen", listen, "--health-listen", health,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--image", "shutdown-manager:bench")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("starting %s: %w", manager, err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if err := waitReady(ctx, "http://"+health+"/readyz"); err != nil {
		log, _ := os.ReadFile(logPath)
		return Result{}, fmt.Errorf("the webhook is not ready: %w\n%s", err, log)
	}

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	// HTTP/2 over one TLS connection, as the API server's webhook client does.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: !http1, MaxIdleConnsPerHost: 64}}
	url := "https://" + listen + webhook.Path
	pid := cmd.Process.Pid

	if err := checkAnswer(client, url, body(-1)); err != nil {
		return Result{}, err
	}
	res := Result{Date: time.Now().UTC().Format(time.RFC3339), CPUs: runtime.NumCPU(), LoadAvgBefore: loadavg(),
		Rate: rate, Duration: duration.String(), Protocol: "HTTP/2"}
	if http1 {
		res.Protocol = "HTTP/1.1"
	}
	if _, _, err := load(client, url, body, rate, warmup, nil); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	res.RSSIdleMiB = statusKiB(pid, "VmRSS") / 1024
	cpuBefore := cpuSeconds(pid)
	stopSampling := make(chan struct{})
	var rssMax float64
	var sampling sync.WaitGroup
	sampling.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				rssMax = max(rssMax, statusKiB(pid, "VmRSS")/1024)
			}
		}
	})
	began := time.Now()
	lat, failures, err := load(client, url, body, rate, duration, &res)
	elapsed := time.Since(began)
	close(stopSampling)
	sampling.Wait()
	if err != nil {
		return res, err
	}
	res.CPUSeconds = cpuSeconds(pid) - cpuBefore
	res.CPUPerReqMs = res.CPUSeconds * 1000 / float64(max(1, len(lat)))
	res.RSSMaxMiB = rssMax
	res.RSSPeakMiB = statusKiB(pid, "VmHWM") / 1024
	res.LoadAvgAfter = loadavg()
	res.Requests, res.Failed = len(lat), failures
	res.AchievedRate = float64(len(lat)) / elapsed.Seconds()
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))])
	}
	res.P50ms, res.P90ms, res.P99ms, res.P999ms = q(0.50), q(0.90), q(0.99), q(0.999)
	if len(lat) > 0 {
		res.MaxMs = ms(lat[len(lat)-1])
	}
	return res, nil
}

// load sends rate requests per second for d, each at its scheduled time on its own goroutine, and returns
// every latency and the number of failed requests; res, when given, records the first failure.
func load(client *http.Client, url string, body func(i int) []byte, rate int, d time.Duration, res *Result) ([]time.Duration, int, error) {
	n := int(d.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	failed := 0
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			time.Sleep(wait) // the schedule itself; this is the load generator, not a synchronisation
		}
		req := body(i)
		wg.Go(func() {
			t0 := time.Now()
			err := send(client, url, req)
			lat[i] = time.Since(t0)
			if err != nil {
				mu.Lock()
				failed++
				if res != nil && res.FirstFailure == "" {
					res.FirstFailure = err.Error()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, failed, nil
}

func send(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, b)
	}
	// A cheap check, so that the load generator leaves the CPU to the webhook: the answer allows the pod and
	// carries a patch (the first answer is decoded in full by run).
	if !bytes.Contains(b, []byte(`"allowed":true`)) || !bytes.Contains(b, []byte(`"patch":"`)) {
		return fmt.Errorf("answer without a patch: %.200s", b)
	}
	return nil
}

// checkAnswer sends one review and decodes the answer in full: an AdmissionReview allowing the pod with a
// JSONPatch.
func checkAnswer(client *http.Client, url string, body []byte) error {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		return fmt.Errorf("decoding the answer: %w", err)
	}
	r := review.Response
	if resp.StatusCode != http.StatusOK || r == nil || !r.Allowed || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch || len(r.Patch) == 0 {
		return fmt.Errorf("answer %s: %+v, want an allowed pod with a JSONPatch", resp.Status, r)
	}
	return nil
}

// reviewBody returns the i-th request's body: the template's pod in an AdmissionReview with its own UID.
func reviewBody(path string) (func(int) []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d appsv1.Deployment
	if err := yaml.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: d.Spec.Template.ObjectMeta,
		Spec:       d.Spec.Template.Spec,
	}
	pod.GenerateName, pod.Namespace = "envoy-5d9c7-", "bench"
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	const uidMark = "UID-PLACEHOLDER-0000000000000000"
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       uidMark,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "bench",
			Operation: admissionv1.Create,
			Object:    kruntime.RawExtension{Raw: raw},
		},
	}
	tmpl, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	return func(i int) []byte {
		return bytes.Replace(tmpl, []byte(uidMark), fmt.Appendf(nil, "%032d", i), 1)
	}, nil
}

func waitReady(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", url, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// statusKiB reads a "Key: N kB" line of /proc/PID/status.
func statusKiB(pid int, key string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return f
		}
	}
	return 0
}

// cpuSeconds is the process's user+system time from /proc/PID/stat (clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
