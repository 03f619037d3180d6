package chart

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/events"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// TestDryRunServer applies every golden value set's output to a real kube-apiserver with --dry-run=server and strict
// field validation: Kubernetes itself decides that every object and field is valid. The cert-manager objects
// (cert-manager.io/v1) are left out: the test API server has no cert-manager CRDs (they are not vendored here), so
// for those value sets the rest of the output is checked and the cert-manager objects only by helm lint and the
// golden files. So are the Prometheus Operator's (monitoring.coreos.com/v1, the monitoring value set): their
// metric names and expressions are checked by TestMonitoringMetricsExist and TestRuleExpressions.
func TestDryRunServer(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			var kept []string
			skipped := 0
			for _, o := range objects(t, h.must(t, vs.templateArgs(h.chart)...)) {
				if strings.HasPrefix(o.APIVersion, "cert-manager.io/") || strings.HasPrefix(o.APIVersion, "monitoring.coreos.com/") {
					skipped++
					continue
				}
				kept = append(kept, string(o.doc))
			}
			if (strings.HasPrefix(vs.name, "cert-manager") || vs.name == "monitoring") && skipped == 0 {
				t.Errorf("value set %s rendered no cert-manager.io or monitoring.coreos.com object", vs.name)
			}
			file := filepath.Join(t.TempDir(), vs.name+".yaml")
			if err := os.WriteFile(file, []byte(strings.Join(kept, "\n---\n")), 0o644); err != nil {
				t.Fatal(err)
			}
			if vs.name == "policy" && api.Version(t).Minor < 36 {
				// Rendered offline (helm template), the policy reaches a server without the kind: it refuses it.
				if out, err := api.DryRun(t.Context(), file); err == nil || !strings.Contains(err.Error()+out, `no matches for kind "MutatingAdmissionPolicy"`) {
					t.Errorf("the policy value set on a server before 1.36: %v, %q; want it refused for want of the kind", err, out)
				}
				return
			}
			api.CreateNamespacesOf(t, file)
			out := api.ApplyDryRun(t, file)
			want := "mutatingwebhookconfiguration.admissionregistration.k8s.io/"
			if vs.name == "policy" {
				want = "mutatingadmissionpolicy.admissionregistration.k8s.io/"
			}
			if !strings.Contains(out, want) {
				t.Errorf("the dry run did not create a %s; kubectl said:\n%s", want, out)
			}
			if skipped > 0 {
				t.Logf("%d cert-manager.io or monitoring.coreos.com objects not sent (no such CRDs in the test API server)", skipped)
			}
		})
	}
}

// TestInstall installs the default webhook mode for real (helm install against the API server, server-side
// apply), then upgrades it: the objects are stored, the MutatingWebhookConfiguration trusts the CA in the Secret,
// the upgrade keeps the same certificate (lookup), and RBAC grants events and the audit's reads, nothing else. A pod
// created with no webhook running is admitted uninjected, and the audit, run as the webhook's ServiceAccount on the
// chart's configuration, finds it and records its Event. The Deployment's pods never run (the test has no kubelet).
func TestInstall(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	api.Kubectl(t, "create", "namespace", "edge")

	install := []string{"install", "shutdown-manager", h.chart, "--namespace", namespace, "--create-namespace",
		"--kubeconfig", api.Kubeconfig, "--set", "events.namespaces={edge}"}
	h.must(t, install...)

	for _, obj := range []string{"deployment/shutdown-manager", "service/shutdown-manager", "poddisruptionbudget/shutdown-manager",
		"serviceaccount/shutdown-manager", "secret/shutdown-manager-tls"} {
		api.Kubectl(t, "get", "--namespace", namespace, obj)
	}
	ca, crt := installedCertificate(t, api, "shutdown-manager")
	if err := verifyServing(ca, crt, "shutdown-manager.shutdown-manager.svc"); err != nil {
		t.Errorf("after install: %v", err)
	}

	h.must(t, "upgrade", "shutdown-manager", h.chart, "--namespace", namespace, "--kubeconfig", api.Kubeconfig,
		"--set", "events.namespaces={edge}", "--set", "webhook.timeoutSeconds=4")
	ca2, crt2 := installedCertificate(t, api, "shutdown-manager")
	if string(ca2) != string(ca) || string(crt2) != string(crt) {
		t.Error("helm upgrade replaced the generated CA or certificate; want them reused (lookup of the Secret)")
	}
	if got := api.Kubectl(t, "get", "mutatingwebhookconfiguration", "shutdown-manager", "-o", "jsonpath={.webhooks[*].timeoutSeconds}"); got != "4 4" {
		t.Errorf("timeoutSeconds after the upgrade = %q, want 4 4 (the upgrade applied)", got)
	}

	const webhookSA, envoySA = "system:serviceaccount:shutdown-manager:shutdown-manager", "system:serviceaccount:edge:envoy"
	for _, tc := range []struct {
		as, namespace, verb, resource, want string
	}{
		{webhookSA, "edge", "create", "events.events.k8s.io", "yes"},
		{webhookSA, "default", "patch", "events.events.k8s.io", "yes"},
		{webhookSA, "edge", "create", "events", "no"}, // core/v1: the manager writes events.k8s.io/v1 only
		{webhookSA, "edge", "get", "pods", "no"},
		{webhookSA, "edge", "delete", "events.events.k8s.io", "no"},
		{webhookSA, "edge", "get", "events.events.k8s.io", "no"},
		{webhookSA, "shutdown-manager", "get", "secrets", "no"},
		{envoySA, "edge", "create", "events.events.k8s.io", "yes"},
		{envoySA, "edge", "patch", "events.events.k8s.io", "yes"},
		{envoySA, "edge", "list", "events.events.k8s.io", "no"},
		{envoySA, "edge", "get", "events.events.k8s.io", "no"},
		{envoySA, "edge", "delete", "events.events.k8s.io", "no"},
		{envoySA, "edge", "get", "pods", "no"},
		{envoySA, "default", "create", "events.events.k8s.io", "no"},
		{"system:serviceaccount:edge:default", "edge", "create", "events.events.k8s.io", "no"},
	} {
		out, _ := api.Command(t.Context(), "auth", "can-i", tc.verb, tc.resource, "--namespace", tc.namespace, "--as", tc.as).Output()
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%s can %s %s in %s: %q, want %q", tc.as, tc.verb, tc.resource, tc.namespace, got, tc.want)
		}
	}

	// failurePolicy Ignore with no webhook pod running (no kubelet here): a pod in an opted-in namespace is still
	// created, without injection.
	api.Kubectl(t, "label", "namespace", "edge", inject.LabelInject+"="+inject.InjectEnabled)
	api.Kubectl(t, "create", "serviceaccount", "default", "--namespace", "edge")
	api.Kubectl(t, "run", "envoy", "--namespace", "edge", "--image=envoyproxy/envoy:v1.36.2", "--restart=Never")
	if got := api.Kubectl(t, "get", "pod", "envoy", "--namespace", "edge", "-o", "jsonpath={.spec.containers[*].name}"); got != "envoy" {
		t.Errorf("pod containers = %q, want envoy (created, not injected: the webhook is down and failurePolicy is Ignore)", got)
	}

	// The audit, as the webhook's ServiceAccount with only what the chart grants it and the chart's own
	// configuration and flags, finds that pod and records its Event.
	for _, tc := range []struct{ verb, resource, namespace, want string }{
		{"get", "mutatingwebhookconfigurations/shutdown-manager", "", "yes"},
		{"get", "mutatingwebhookconfigurations/another", "", "no"},
		{"update", "mutatingwebhookconfigurations/shutdown-manager", "", "no"},
		{"list", "pods", "edge", "yes"},
		{"list", "namespaces", "", "yes"},
		{"list", "events", "edge", "yes"},
		{"watch", "pods", "edge", "no"},
		{"delete", "pods", "edge", "no"},
	} {
		args := []string{"auth", "can-i", tc.verb, tc.resource, "--as", webhookSA}
		if tc.namespace != "" {
			args = append(args, "--namespace", tc.namespace)
		}
		out, _ := api.Command(t.Context(), args...).Output()
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%s can %s %s in %q: %q, want %q", webhookSA, tc.verb, tc.resource, tc.namespace, got, tc.want)
		}
	}
	tok := strings.TrimSpace(api.Kubectl(t, "create", "token", "--namespace", namespace, "shutdown-manager"))
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: webhook, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: webhook}}]
current-context: c
`, api.URL, api.CAFile, tok), 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := events.NewReader(kc, "", "shutdown-manager-test")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal([]byte(api.Kubectl(t, "get", "deployment", "shutdown-manager", "--namespace", namespace, "-o", "json")), &d); err != nil {
		t.Fatal(err)
	}
	configuration := ""
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--audit-configuration="); ok {
			configuration = v
		}
	}
	a := webhook.NewAuditor(reader, webhook.AuditConfig{Configuration: configuration,
		Inject: inject.Config{Image: "ghcr.io/envoy-shutdown-manager/shutdown-manager:" + releaseVersion}, Instance: "audit@test"}, nil, nil)
	res, err := a.Pass(t.Context())
	if err != nil || !slices.Equal(res.Missing, []string{"edge/envoy"}) || res.Recorded != 1 {
		t.Errorf("audit as the webhook's ServiceAccount (configuration %q): found %v, recorded %d, err %v; want [edge/envoy], 1, nil",
			configuration, res.Missing, res.Recorded, err)
	}
	if got := api.Kubectl(t, "get", "events", "--namespace", "edge", "--field-selector", "reason="+webhook.ReasonMissing,
		"-o", "jsonpath={.items[*].involvedObject.name}"); got != "envoy" {
		t.Errorf("%s Events in edge regard %q, want envoy", webhook.ReasonMissing, got)
	}
}

// TestInstallEventsAllServiceAccounts: with events.allServiceAccounts the Events RoleBinding names the group of
// every ServiceAccount of the namespace, so that pods whose accounts have generated names (Envoy Gateway's
// envoy-<namespace>-<hash>) record their Events; the API server stores it, and grants creating and patching
// Events in that namespace to any of its accounts, and nothing else.
func TestInstallEventsAllServiceAccounts(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	api.Kubectl(t, "create", "namespace", "envoy-gateway-system")
	h.must(t, "install", "shutdown-manager", h.chart, "--namespace", namespace, "--create-namespace", "--kubeconfig", api.Kubeconfig,
		"--set", "events.namespaces={envoy-gateway-system}", "--set", "events.allServiceAccounts=true")
	if got := api.Kubectl(t, "get", "rolebinding", "shutdown-manager-events", "--namespace", "envoy-gateway-system",
		"-o", "jsonpath={range .subjects[*]}{.kind}/{.name} {end}"); strings.TrimSpace(got) != "Group/system:serviceaccounts:envoy-gateway-system" {
		t.Errorf("RoleBinding subjects = %q, want the group of the namespace's ServiceAccounts only", got)
	}
	const gw = "system:serviceaccount:envoy-gateway-system:envoy-default-37a8eec1" // Envoy Gateway's account of Gateway default/eg
	for _, tc := range []struct {
		as, namespace, verb, resource, want string
	}{
		{gw, "envoy-gateway-system", "create", "events.events.k8s.io", "yes"},
		{gw, "envoy-gateway-system", "patch", "events.events.k8s.io", "yes"},
		{gw, "envoy-gateway-system", "get", "events.events.k8s.io", "no"},
		{gw, "envoy-gateway-system", "create", "events", "no"},
		{gw, "envoy-gateway-system", "get", "pods", "no"},
		{gw, "default", "create", "events.events.k8s.io", "no"},
		{"system:serviceaccount:default:envoy", "default", "create", "events.events.k8s.io", "no"},
	} {
		args := []string{"auth", "can-i", tc.verb, tc.resource, "--namespace", tc.namespace, "--as", tc.as}
		if strings.HasPrefix(tc.as, "system:serviceaccount:") {
			// --as alone carries no groups: the API server's authenticator adds a ServiceAccount's, impersonation does not.
			ns := strings.Split(tc.as, ":")[2]
			args = append(args, "--as-group=system:serviceaccounts", "--as-group=system:serviceaccounts:"+ns, "--as-group=system:authenticated")
		}
		out, _ := api.Command(t.Context(), args...).Output()
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%s can %s %s in %s: %q, want %q", tc.as, tc.verb, tc.resource, tc.namespace, got, tc.want)
		}
	}
}

// TestInstallExistingSecret installs with certificates.source secret and no caBundle value: the chart reads the CA
// from the Secret at install time, and the webhook trusts it.
func TestInstallExistingSecret(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	const ns, release = "pki", "pki"
	host := "pki-shutdown-manager." + ns + ".svc"
	caPEM, crtPEM, keyPEM := servingCertificate(t, host)
	api.Kubectl(t, "create", "namespace", ns)
	dir := t.TempDir()
	for name, data := range map[string][]byte{"ca.crt": caPEM, "tls.crt": crtPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	api.Kubectl(t, "create", "secret", "generic", "webhook-serving", "--namespace", ns, "--type=kubernetes.io/tls",
		"--from-file="+filepath.Join(dir, "ca.crt"), "--from-file="+filepath.Join(dir, "tls.crt"), "--from-file="+filepath.Join(dir, "tls.key"))

	h.must(t, "install", release, h.chart, "--namespace", ns, "--kubeconfig", api.Kubeconfig,
		"--set", "certificates.source=secret,certificates.secretName=webhook-serving")
	bundles := api.Kubectl(t, "get", "mutatingwebhookconfiguration", "pki-shutdown-manager", "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}")
	for _, b := range strings.Fields(bundles) {
		if got := decodeBase64(t, b); string(got) != string(caPEM) {
			t.Errorf("caBundle = %q, want the Secret's ca.crt", firstLines(string(got), 2))
		}
	}
	if n := len(strings.Fields(bundles)); n != 2 {
		t.Errorf("%d caBundles, want 2 (one per webhook entry)", n)
	}
	if out, err := api.Command(t.Context(), "get", "secret", "pki-shutdown-manager-tls", "--namespace", ns).CombinedOutput(); err == nil {
		t.Errorf("source secret created a Secret of its own:\n%s", out)
	}
	if got := api.Kubectl(t, "get", "deployment", "pki-shutdown-manager", "--namespace", ns, "-o", "jsonpath={.spec.template.spec.volumes[0].secret.secretName}"); got != "webhook-serving" {
		t.Errorf("the Deployment mounts Secret %q, want webhook-serving", got)
	}
}

// TestInstallPolicy installs mode policy for real: the policy and its bindings are stored, and no webhook object is.
func TestInstallPolicy(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	args := []string{"install", "shutdown-manager", h.chart, "--namespace", namespace, "--create-namespace",
		"--kubeconfig", api.Kubeconfig, "--set", "mode=policy", "--set-file", "policy.manifest=" + policyManifest}
	if v := api.Version(t); v.Minor < 36 {
		// No MutatingAdmissionPolicy v1 before 1.36: the chart refuses with one line that says what to do.
		out, err := h.run(args...)
		if want := "mode=policy needs Kubernetes >= 1.36"; err == nil || !strings.Contains(err.Error()+out, want) {
			t.Errorf("helm install mode=policy on Kubernetes %s = %v:\n%s\nwant it refused saying %q", v.Server, err, out, want)
		}
		return
	}
	h.must(t, args...)
	if got := api.Kubectl(t, "get", "mutatingadmissionpolicy", "-o", "name"); strings.TrimSpace(got) != "mutatingadmissionpolicy.admissionregistration.k8s.io/shutdown-manager-inject" {
		t.Errorf("policies = %q, want shutdown-manager-inject", got)
	}
	if got := strings.Fields(api.Kubectl(t, "get", "mutatingadmissionpolicybinding", "-o", "name")); len(got) == 0 {
		t.Error("no MutatingAdmissionPolicyBinding stored")
	}
	for _, kind := range []string{"mutatingwebhookconfiguration", "deployment", "secret"} {
		if got := strings.TrimSpace(api.Kubectl(t, "get", kind, "--all-namespaces", "-l", "app.kubernetes.io/instance=shutdown-manager", "-o", "name")); got != "" {
			t.Errorf("mode policy installed %s", got)
		}
	}
}

// TestInstallImageVolume installs the webhook with inject.binaryFrom=image-volume: on a server with image volumes
// (>= 1.35) the webhook is told to use them; before, the chart refuses with one line, since that server would drop
// the volume and Envoy's mount of it from every pod (TestFeatureMatrix in test/kube shows it doing so).
func TestInstallImageVolume(t *testing.T) {
	h := newHelm(t)
	api := kubetest.Start(t)
	args := []string{"install", "shutdown-manager", h.chart, "--namespace", namespace, "--create-namespace",
		"--kubeconfig", api.Kubeconfig, "--set", "inject.binaryFrom=image-volume"}
	if v := api.Version(t); v.Minor < 35 {
		out, err := h.run(args...)
		want := "inject.binaryFrom=image-volume needs Kubernetes >= 1.35 (image volumes); this cluster is " + v.Server
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("helm install inject.binaryFrom=image-volume on Kubernetes %s = %v:\n%s\nwant it refused saying %q", v.Server, err, out, want)
		}
		if got := strings.TrimSpace(api.Kubectl(t, "get", "mutatingwebhookconfiguration", "-o", "name")); got != "" {
			t.Errorf("the refused install left %s", got)
		}
		return
	}
	h.must(t, args...)
	got := api.Kubectl(t, "get", "deployment", "shutdown-manager", "--namespace", namespace, "-o", "jsonpath={.spec.template.spec.containers[0].args}")
	if !strings.Contains(got, `"--binary-from=image-volume"`) {
		t.Errorf("the webhook's args = %s, want --binary-from=image-volume among them", got)
	}
}

// installedCertificate returns the CA every webhook entry trusts (failing t unless they all trust the Secret's
// ca.crt) and the Secret's tls.crt.
func installedCertificate(t *testing.T, api *kubetest.APIServer, name string) (ca, crt []byte) {
	t.Helper()
	var secret struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(api.Kubectl(t, "get", "secret", name+"-tls", "--namespace", namespace, "-o", "json")), &secret); err != nil {
		t.Fatal(err)
	}
	ca = decodeBase64(t, secret.Data["ca.crt"])
	crt = decodeBase64(t, secret.Data["tls.crt"])
	bundles := strings.Fields(api.Kubectl(t, "get", "mutatingwebhookconfiguration", name, "-o", "jsonpath={.webhooks[*].clientConfig.caBundle}"))
	if len(bundles) != 2 {
		t.Fatalf("%d caBundles in the MutatingWebhookConfiguration, want 2 (one per webhook entry)", len(bundles))
	}
	for _, b := range bundles {
		if got := decodeBase64(t, b); string(got) != string(ca) {
			t.Errorf("a webhook entry's caBundle is not the Secret's ca.crt:\n%s", firstLines(string(got), 2))
		}
	}
	return ca, crt
}

// servingCertificate makes a CA and a certificate it signs for host, as a PKI outside the chart would.
func servingCertificate(t *testing.T, host string) (caPEM, crtPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
