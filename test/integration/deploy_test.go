package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// TestDeployBootstrap runs the bootstrap of deploy/common/envoy-config.yaml on every real Envoy, with its
// addresses moved to loopback and free ports: it validates, routes to the upstream, and its readiness
// listener answers /ready 200, then 503 once health checks fail (what the drain does first), then 200
// again after /healthcheck/ok. Each answer holds for an HTTP/1.0 request without Host too: load balancers' default
// checks (HAProxy's `option httpchk`) send those, which Envoy answers 426 unless the HTTP manager accepts HTTP/1.0.
func TestDeployBootstrap(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "common", "envoy-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatal(err)
	}
	boot := cm.Data["envoy.yaml"]
	for _, want := range []string{"address: 127.0.0.1, port_value: 9901", "address: 0.0.0.0, port_value: 8080", "address: 0.0.0.0, port_value: 8081", "address: echo, port_value: 8080"} {
		if !strings.Contains(boot, want) {
			t.Fatalf("the bootstrap no longer has %q: update this test", want)
		}
	}
	forEachEnvoyLine(t, func(t *testing.T, bin testbed.Binary) {
		up := testbed.StartUpstreamTB(t)
		upHost, upPort, _ := net.SplitHostPort(up.HTTPAddr)
		local := strings.NewReplacer(
			"address: 127.0.0.1, port_value: 9901", "address: 127.0.0.1, port_value: 0",
			"address: 0.0.0.0, port_value: 8080", "address: 127.0.0.1, port_value: 0",
			"address: 0.0.0.0, port_value: 8081", "address: 127.0.0.1, port_value: 0",
			"address: echo, port_value: 8080", "address: "+upHost+", port_value: "+upPort,
		).Replace(boot)
		dir := shortTempDir(t)
		config := filepath.Join(dir, "envoy.yaml")
		if err := os.WriteFile(config, []byte(local), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin.Path, "--mode", "validate", "-c", config, "--disable-hot-restart").CombinedOutput(); err != nil {
			t.Fatalf("envoy --mode validate: %v\n%s", err, out)
		}

		ctx := testContext(t)
		addrPath := filepath.Join(dir, "admin.addr")
		envoy, err := testproc.Start(context.Background(), "envoy",
			exec.Command(bin.Path, "-c", config, "--disable-hot-restart", "--concurrency", "1", "--admin-address-path", addrPath),
			filepath.Join(dir, "envoy.log"))
		if err != nil {
			t.Fatal(err)
		}
		envoy.StopAtCleanup(t, 0)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("%s (envoy's log: %s)", fmt.Sprintf(format, args...), envoy.LogPath)
		}

		admin, err := poll(ctx, func() (string, error) {
			b, err := os.ReadFile(addrPath)
			if err != nil || len(strings.TrimSpace(string(b))) == 0 {
				return "", fmt.Errorf("no admin address yet: %v", err)
			}
			return "http://" + strings.TrimSpace(string(b)), nil
		})
		if err != nil {
			fail("%v", err)
		}
		ports, err := poll(ctx, func() (map[string]string, error) { return listenerAddrs(ctx, admin) })
		if err != nil {
			fail("%v", err)
		}
		ready := "http://" + ports["readiness"] + "/ready"
		if _, err := poll(ctx, func() (int, error) { return expectStatus(ctx, http.MethodGet, ready, 200) }); err != nil {
			fail("readiness before the drain: %v", err)
		}
		if err := expectHTTP10(ctx, ports["readiness"], "/ready", 200); err != nil {
			fail("readiness before the drain, HTTP/1.0 without Host: %v", err)
		}
		if _, err := poll(ctx, func() (int, error) { return expectStatus(ctx, http.MethodGet, "http://"+ports["ingress"]+"/", 200) }); err != nil {
			fail("a request through the ingress listener: %v", err)
		}
		if _, err := expectStatus(ctx, http.MethodPost, admin+"/healthcheck/fail", 200); err != nil {
			fail("%v", err)
		}
		if _, err := expectStatus(ctx, http.MethodGet, ready, 503); err != nil {
			fail("readiness once health checks fail: %v", err)
		}
		if err := expectHTTP10(ctx, ports["readiness"], "/ready", 503); err != nil {
			fail("readiness once health checks fail, HTTP/1.0 without Host: %v", err)
		}
		if _, err := expectStatus(ctx, http.MethodGet, "http://"+ports["ingress"]+"/", 200); err != nil {
			fail("the ingress listener still serves while draining: %v", err)
		}
		if _, err := expectStatus(ctx, http.MethodPost, admin+"/healthcheck/ok", 200); err != nil {
			fail("%v", err)
		}
		if _, err := expectStatus(ctx, http.MethodGet, ready, 200); err != nil {
			fail("readiness after /healthcheck/ok: %v", err)
		}
		if err := expectHTTP10(ctx, ports["readiness"], "/ready", 200); err != nil {
			fail("readiness after /healthcheck/ok, HTTP/1.0 without Host: %v", err)
		}
	})
}

// poll calls f every 20 ms until it succeeds or ctx ends (waiting for Envoy to come up).
func poll[T any](ctx context.Context, f func() (T, error)) (T, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := f()
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// expectStatus sends one request on a new connection and checks the status.
func expectStatus(ctx context.Context, method, url string, want int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %q, want %d", method, url, resp.StatusCode, body, want)
	}
	return resp.StatusCode, nil
}

// expectHTTP10 sends "GET path HTTP/1.0" with no header at all on a new connection to addr, as HAProxy's default
// `option httpchk GET path` does, and checks the status of the answer.
func expectHTTP10(ctx context.Context, addr, path string, want int) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.0\r\n\r\n", path); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("GET %s HTTP/1.0 without Host: %d %q, want %d", path, resp.StatusCode, body, want)
	}
	return nil
}

// listenerAddrs reads the bound address of every listener from the admin API.
func listenerAddrs(ctx context.Context, admin string) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/listeners?format=json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	addrs, err := testbed.ParseListenerAddrs(body)
	if err != nil {
		return nil, err
	}
	for name, a := range addrs {
		if strings.HasSuffix(a, ":0") {
			delete(addrs, name) // not bound yet
		}
	}
	if addrs["ingress"] == "" || addrs["readiness"] == "" {
		return nil, errors.New("listeners ingress and readiness not bound yet")
	}
	return addrs, nil
}
