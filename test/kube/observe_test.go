package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// TestWebhookSidecarServiceAccount: in sidecar mode, the sidecar the webhook adds is stored with the pod's
// ServiceAccount token mounted, as a pod injected before it reached the API server (`shutdown-manager inject`)
// has it from the ServiceAccount admission plugin; without it the sidecar's Events could only be logged. A pod
// that turns automount off gets no token at the default path in any container, and the manager's own token
// (inject's projected volume, accepted and stored by the API server) in the sidecar and Envoy's container only. The webhook's health port serves its build_info and
// the serving certificate's expiry; with the webhook down and failurePolicy Fail, the API server refuses the pod
// and counts it in the series the chart's alert reads.
func TestWebhookSidecarServiceAccount(t *testing.T) {
	api := kubetest.Start(t)
	ca, err := testpki.NewCA("shutdown-manager webhook test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := newCertDir(t, ca)
	wh := startWebhook(t, certs, api.Kubeconfig, "--mode", "sidecar")
	hook := hookConfig{url: "https://" + wh.listen + webhook.Path, caBundle: ca.PEM, failurePolicy: admissionregistrationv1.Fail}
	apply(t, api, hook.object())
	for _, ns := range []string{"opted", "plain"} {
		apply(t, api, namespaceList(ns))
	}
	api.Kubectl(t, "label", "namespace", "opted", inject.LabelInject+"="+inject.InjectEnabled)

	template := plainTemplate(t)
	pod := func(ns, name string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: *template.ObjectMeta.DeepCopy(), Spec: *template.Spec.DeepCopy()}
		p.APIVersion, p.Kind = "v1", "Pod"
		p.Namespace, p.Name = ns, name
		delete(p.Labels, inject.LabelInject)
		return p
	}
	sidecarOf := func(t *testing.T, p *corev1.Pod) corev1.Container {
		t.Helper()
		sameTokenVolume(&p.Spec)
		for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
			for _, c := range cs {
				if c.Name == inject.SidecarContainer {
					return c
				}
			}
		}
		t.Fatalf("pod %s has no container %s", p.Name, inject.SidecarContainer)
		return corev1.Container{}
	}

	t.Run("the sidecar gets the token mount a pod injected beforehand has", func(t *testing.T) {
		got := sidecarOf(t, decodePod(t, create(t, api, pod("opted", "by-webhook")).stdout))
		// The reference: the same pod injected before it reaches the API server, as `inject` does.
		pre := pod("plain", "by-inject")
		if err := inject.Inject(&pre.ObjectMeta, &pre.Spec, inject.Config{Image: testImage, Version: cli.Version, Mode: inject.ModeSidecar}); err != nil {
			t.Fatal(err)
		}
		want := sidecarOf(t, decodePod(t, create(t, api, pre, "--dry-run=server").stdout))
		if !equality.Semantic.DeepEqual(got.VolumeMounts, want.VolumeMounts) {
			t.Errorf("the webhook's sidecar mounts %+v, want %+v (the ServiceAccount plugin's, on a pod injected beforehand)", got.VolumeMounts, want.VolumeMounts)
		}
		if !strings.Contains(fmtMounts(got.VolumeMounts), "kube-api-access-@"+inject.ServiceAccountDir) {
			t.Errorf("the sidecar has no token mount at %s: %+v", inject.ServiceAccountDir, got.VolumeMounts)
		}
	})

	t.Run("automount off: the manager's own token, where it runs only", func(t *testing.T) {
		p := pod("opted", "no-automount")
		p.Spec.AutomountServiceAccountToken = new(false)
		stored := decodePod(t, create(t, api, p).stdout)
		for _, cs := range [][]corev1.Container{stored.Spec.InitContainers, stored.Spec.Containers} {
			for _, c := range cs {
				mounts := fmtMounts(c.VolumeMounts)
				if strings.Contains(mounts, inject.ServiceAccountDir) {
					t.Errorf("container %s mounts a token at the default path: %+v", c.Name, c.VolumeMounts)
				}
				// The sidecar serves the drain; Envoy's exec hook runs `drain --via`, which drains by itself when
				// the sidecar is gone: both run the manager. The install container never calls the API.
				want := c.Name == inject.SidecarContainer || c.Name == "envoy"
				if got := strings.Contains(mounts, inject.APIAccessVolume+"@"+inject.APIAccessDir); got != want {
					t.Errorf("container %s mounts the manager's token at %s: %v, want %v (%s)", c.Name, inject.APIAccessDir, got, want, mounts)
				}
			}
		}
		i := slices.IndexFunc(stored.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.APIAccessVolume })
		if i < 0 || stored.Spec.Volumes[i].Projected == nil || len(stored.Spec.Volumes[i].Projected.Sources) != 3 ||
			stored.Spec.Volumes[i].Projected.Sources[0].ServiceAccountToken == nil {
			t.Errorf("stored volumes %+v: no projected %s with a ServiceAccount token", stored.Spec.Volumes, inject.APIAccessVolume)
		}
		if slices.ContainsFunc(stored.Spec.Volumes, func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "kube-api-access-") }) {
			t.Errorf("the API server added its own token volume to a pod that turns automount off: %+v", stored.Spec.Volumes)
		}
		sidecarOf(t, stored)
	})

	t.Run("the health port serves build_info and the certificate's expiry", func(t *testing.T) {
		resp, err := http.Get("http://" + wh.health + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body := string(b)
		notAfter := certs.notAfter(t)
		for _, want := range []string{
			`shutdown_manager_build_info{goversion="`,
			`version="` + cli.Version + `"} 1`,
			"shutdown_manager_webhook_certificate_expiry_timestamp_seconds " + formatFloat(float64(notAfter.Unix())),
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics does not have %q", want)
			}
		}
	})

	t.Run("webhook down, failurePolicy Fail: refused, and counted as the rules read it", func(t *testing.T) {
		wh.stop(t)
		in, err := json.Marshal(pod("opted", "during-outage"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := api.Command(ctx, "create", "-f", "-")
		cmd.Stdin = bytes.NewReader(in)
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "failed calling webhook") {
			t.Fatalf("kubectl create with the webhook down: %v\n%s\nwant it refused: failed calling webhook", err, out)
		}
		// The series test/chart's PrometheusRule and dashboard read (apiserverMetrics there), with its labels.
		var line string
		for l := range strings.Lines(api.Kubectl(t, "get", "--raw", "/metrics")) {
			if strings.HasPrefix(l, "apiserver_admission_webhook_rejection_count{") && strings.Contains(l, `name="namespace.shutdown-manager.io"`) {
				line = strings.TrimSpace(l)
			}
		}
		labels := regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(line, -1)
		var names []string
		for _, m := range labels {
			names = append(names, m[1])
		}
		if !strings.Contains(line, `error_type="calling_webhook_error"`) || strings.Join(names, ",") != "error_type,name,operation,rejection_code,type" {
			t.Errorf("the API server's rejection series: %q, want one with error_type calling_webhook_error and labels error_type,name,operation,rejection_code,type", line)
		}
	})
}

// fmtMounts is "name@path" of each mount, token volume names cut to their prefix (sameTokenVolume), for searching.
func fmtMounts(ms []corev1.VolumeMount) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString(m.Name + "@" + m.MountPath + " ")
	}
	return b.String()
}

// notAfter is the expiry of the serving certificate in the files now.
func (c *certDir) notAfter(t *testing.T) time.Time {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf.NotAfter
}

// formatFloat writes a sample's value as the Prometheus text format does (client_golang's expfmt).
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
