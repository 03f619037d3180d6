package docs

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// The cloud load balancers' examples docs/load-balancers.md shows. No test runs them against a cloud: this file
// checks them against what is tested here (deploy/'s pods and readiness listener) and against the drain settings
// and the figures the page gives beside them.
const (
	awsExample = "docs/examples/aws-nlb-service.yaml"
	gkeExample = "docs/examples/gke-backendconfig.yaml"
)

// readiness is deploy/'s Envoy pod as a load balancer sees it: the Service's selector, the readiness port and
// path kubelet probes.
type readiness struct {
	selector map[string]string
	port     int32
	path     string
}

func deployReadiness(t *testing.T) readiness {
	t.Helper()
	var svc corev1.Service
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "deploy/common/envoy-service.yaml")), &svc); err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(readRepo(t, "deploy/plain/envoy.yaml")), &dep); err != nil {
		t.Fatal(err)
	}
	r := readiness{selector: svc.Spec.Selector}
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name != "envoy" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
			continue
		}
		r.path = c.ReadinessProbe.HTTPGet.Path
		for _, p := range c.Ports {
			if p.Name == c.ReadinessProbe.HTTPGet.Port.String() {
				r.port = p.ContainerPort
			}
		}
	}
	if len(r.selector) == 0 || r.port == 0 || r.path == "" {
		t.Fatalf("deploy/: no selector, readiness port or path: %+v", r)
	}
	return r
}

// yamlDocs are the documents of a multi-document YAML file.
func yamlDocs(text string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---\n`).Split(text, -1) {
		if strings.TrimSpace(d) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// pageSettings are the drain timeout a section of docs/load-balancers.md advises (its first
// `--drain-timeout=Ns`), and the section's prose (fenced blocks left out: their comments would read as
// headings) with its lines joined.
func pageSettings(t *testing.T, heading string) (time.Duration, string) {
	t.Helper()
	prose := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(readRepo(t, "docs/load-balancers.md"), "")
	text := strings.Join(strings.Fields(section(t, prose, heading)), " ")
	m := regexp.MustCompile("`--drain-timeout=(\\d+)s`").FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("docs/load-balancers.md %q advises no --drain-timeout", heading)
	}
	return time.Duration(atoi(t, m[1])) * time.Second, text
}

// checkPageFigures: the section says the mark-down time the example's checks give ((threshold-1) × interval to
// threshold × interval) and the grace period inject writes for the drain timeout it advises (hook and sidecar
// modes).
func checkPageFigures(t *testing.T, heading, text string, interval, threshold int, timeout time.Duration) {
	t.Helper()
	if want := fmt.Sprintf("unhealthy %d–%d s after the drain starts", (threshold-1)*interval, threshold*interval); !strings.Contains(text, want) {
		t.Errorf("docs/load-balancers.md %q does not say %q, what its example's checks give", heading, want)
	}
	grace := int((timeout + inject.HookMargin) / time.Second)
	if !regexp.MustCompile(fmt.Sprintf(`grace period (of )?%d s`, grace)).MatchString(text) {
		t.Errorf("docs/load-balancers.md %q does not give the grace period inject writes for --drain-timeout=%s (%d s)", heading, timeout, grace)
	}
}

func atLeast(t *testing.T, what string, got string, min time.Duration, max int) {
	t.Helper()
	n, err := strconv.Atoi(got)
	if err != nil {
		t.Errorf("%s = %q: not a whole number of seconds", what, got)
		return
	}
	if time.Duration(n)*time.Second < min || n > max {
		t.Errorf("%s = %d s: want at least the drain timeout the page advises (%s) and at most %d", what, n, min, max)
	}
}

// TestCloudExamples: docs/examples/aws-nlb-service.yaml is a Service (decoded strictly) of deploy/'s Envoy pods
// whose NLB checks their readiness listener by HTTP and keeps the connections of an unhealthy or deregistered pod
// longer than the drain timeout the page advises; docs/examples/gke-backendconfig.yaml is a BackendConfig that
// does the same for Google Cloud's Application Load Balancer and a Service of the same pods that uses it; and the
// page's figures (mark-down time, grace period) are those of the files.
func TestCloudExamples(t *testing.T) {
	ready := deployReadiness(t)
	t.Run("aws", func(t *testing.T) {
		timeout, text := pageSettings(t, "### AWS Network Load Balancer")
		var svc corev1.Service
		if err := yaml.UnmarshalStrict([]byte(readRepo(t, awsExample)), &svc); err != nil {
			t.Fatalf("%s: %v", awsExample, err)
		}
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || fmt.Sprint(svc.Spec.Selector) != fmt.Sprint(ready.selector) {
			t.Errorf("%s: type %s, selector %v; want LoadBalancer, deploy/'s %v", awsExample, svc.Spec.Type, svc.Spec.Selector, ready.selector)
		}
		const p = "service.beta.kubernetes.io/aws-load-balancer-"
		a := svc.Annotations
		for k, want := range map[string]string{
			"type": "external", "nlb-target-type": "ip", "healthcheck-protocol": "http",
			"healthcheck-port": strconv.Itoa(int(ready.port)), "healthcheck-path": ready.path,
		} {
			if a[p+k] != want {
				t.Errorf("%s: %s%s = %q, want %q", awsExample, p, k, a[p+k], want)
			}
		}
		interval, threshold := atoi(t, a[p+"healthcheck-interval"]), atoi(t, a[p+"healthcheck-unhealthy-threshold"])
		if interval < 5 || interval > 300 || threshold < 2 || threshold > 10 {
			t.Errorf("%s: checks every %d s, %d failures: AWS takes 5-300 s and 2-10", awsExample, interval, threshold)
		}
		attrs := map[string]string{}
		for _, kv := range strings.Split(a[p+"target-group-attributes"], ",") {
			k, v, _ := strings.Cut(kv, "=")
			attrs[k] = v
		}
		for k := range attrs {
			switch k {
			case "target_health_state.unhealthy.connection_termination.enabled", "target_health_state.unhealthy.draining_interval_seconds",
				"deregistration_delay.timeout_seconds", "deregistration_delay.connection_termination.enabled":
			default:
				t.Errorf("%s: target group attribute %q is not one the page explains", awsExample, k)
			}
		}
		if attrs["target_health_state.unhealthy.connection_termination.enabled"] != "false" || attrs["deregistration_delay.connection_termination.enabled"] != "false" {
			t.Errorf("%s: the NLB must not reset the connections of an unhealthy or deregistered pod: %v", awsExample, attrs)
		}
		atLeast(t, "target_health_state.unhealthy.draining_interval_seconds", attrs["target_health_state.unhealthy.draining_interval_seconds"], timeout, 360000)
		atLeast(t, "deregistration_delay.timeout_seconds", attrs["deregistration_delay.timeout_seconds"], timeout, 3600)
		checkPageFigures(t, "### AWS Network Load Balancer", text, interval, threshold, timeout)
	})
	t.Run("gke", func(t *testing.T) {
		timeout, text := pageSettings(t, "### Google Cloud")
		docs := yamlDocs(readRepo(t, gkeExample))
		if len(docs) != 2 {
			t.Fatalf("%s: %d documents, want the BackendConfig and the Service", gkeExample, len(docs))
		}
		// The fields of GKE's BackendConfig (cloud.google.com/v1) the example sets; strict decoding refuses any
		// other, so the file holds no field this test does not check.
		var bc struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				HealthCheck struct {
					Type               string `json:"type"`
					Port               int32  `json:"port"`
					RequestPath        string `json:"requestPath"`
					CheckIntervalSec   int    `json:"checkIntervalSec"`
					TimeoutSec         int    `json:"timeoutSec"`
					UnhealthyThreshold int    `json:"unhealthyThreshold"`
					HealthyThreshold   int    `json:"healthyThreshold"`
				} `json:"healthCheck"`
				ConnectionDraining struct {
					DrainingTimeoutSec int `json:"drainingTimeoutSec"`
				} `json:"connectionDraining"`
			} `json:"spec"`
		}
		if err := yaml.UnmarshalStrict([]byte(docs[0]), &bc); err != nil {
			t.Fatalf("%s: %v", gkeExample, err)
		}
		hc := bc.Spec.HealthCheck
		if bc.APIVersion != "cloud.google.com/v1" || bc.Kind != "BackendConfig" || hc.Type != "HTTP" || hc.Port != ready.port || hc.RequestPath != ready.path {
			t.Errorf("%s: %s %s checking %s %d %s; want a cloud.google.com/v1 BackendConfig checking HTTP %d %s", gkeExample, bc.APIVersion, bc.Kind, hc.Type, hc.Port, hc.RequestPath, ready.port, ready.path)
		}
		if hc.TimeoutSec > hc.CheckIntervalSec {
			t.Errorf("%s: a check timeout (%d s) longer than the interval (%d s)", gkeExample, hc.TimeoutSec, hc.CheckIntervalSec)
		}
		atLeast(t, "connectionDraining.drainingTimeoutSec", strconv.Itoa(bc.Spec.ConnectionDraining.DrainingTimeoutSec), timeout, 3600)
		var svc corev1.Service
		if err := yaml.UnmarshalStrict([]byte(docs[1]), &svc); err != nil {
			t.Fatalf("%s: %v", gkeExample, err)
		}
		if fmt.Sprint(svc.Spec.Selector) != fmt.Sprint(ready.selector) {
			t.Errorf("%s: the Service selects %v, deploy/'s pods are %v", gkeExample, svc.Spec.Selector, ready.selector)
		}
		var neg struct {
			Ingress bool `json:"ingress"`
		}
		var backend struct {
			Default string `json:"default"`
		}
		if err := json.Unmarshal([]byte(svc.Annotations["cloud.google.com/neg"]), &neg); err != nil || !neg.Ingress {
			t.Errorf("%s: cloud.google.com/neg = %q (%v): want NEGs for the Ingress", gkeExample, svc.Annotations["cloud.google.com/neg"], err)
		}
		if err := json.Unmarshal([]byte(svc.Annotations["cloud.google.com/backend-config"]), &backend); err != nil || backend.Default != bc.Metadata.Name {
			t.Errorf("%s: cloud.google.com/backend-config = %q (%v): want the BackendConfig %q", gkeExample, svc.Annotations["cloud.google.com/backend-config"], err, bc.Metadata.Name)
		}
		checkPageFigures(t, "### Google Cloud", text, hc.CheckIntervalSec, hc.UnhealthyThreshold, timeout)
	})
}
