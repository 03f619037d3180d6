package kube

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manifest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// TestTakeoverControllers takes over the Envoy workloads Contour and Envoy Gateway render (read from their Go
// modules through the Go module proxy) on a real kube-apiserver, with `shutdown-manager webhook --takeover`
// registered as the chart registers it:
//   - the peers' controllers stay happy: each Deployment or DaemonSet created in an opted-in namespace is stored
//     exactly as the API server stores it without any webhook (the webhook mutates pods only), while a pod
//     created from its template is taken over, exactly as `inject --takeover` does it (webhook = inject);
//   - `inject --takeover` of every workload passes the API server's strict server-side dry run, and
//     `uninject` gives back the very object.
func TestTakeoverControllers(t *testing.T) {
	workloads := peers.Workloads(t)
	api := kubetest.Start(t)
	ca, err := testpki.NewCA("shutdown-manager takeover test CA")
	if err != nil {
		t.Fatal(err)
	}
	wh := startWebhook(t, newCertDir(t, ca), api.Kubeconfig, "--takeover")
	hook := hookConfig{url: "https://" + wh.listen + webhook.Path, caBundle: ca.PEM, failurePolicy: admissionregistrationv1.Fail}
	cfg := hook.object().(*admissionregistrationv1.MutatingWebhookConfiguration)
	for _, w := range cfg.Webhooks {
		for _, r := range w.Rules {
			if len(r.Resources) != 1 || r.Resources[0] != "pods" {
				t.Fatalf("webhook %s has rule %v: the webhook must mutate pods only", w.Name, r)
			}
		}
	}
	apply(t, api, cfg)
	for _, ns := range []string{"opted", "plain"} {
		apply(t, api, namespaceList(ns))
	}
	api.Kubectl(t, "label", "namespace", "opted", inject.LabelInject+"="+inject.InjectEnabled)
	serviceAccounts(t, api, workloads, "opted", "plain")
	priorityClasses(t, api, workloads)

	injectCfg := inject.Config{Image: testImage, Version: cli.Version, Takeover: true}
	var injected bytes.Buffer
	refused := 0
	for i, w := range workloads {
		if w.EnvoyRefuses() {
			// Envoy would not start on the pod as written: the takeover needs the admin address given.
			w.YAML = withPodAnnotation(t, w.YAML, inject.AnnotationAdminAddress, "http://127.0.0.1:19000")
		}
		t.Run(w.Source, func(t *testing.T) {
			wl, ok := manifest.LookupWorkload("apps/v1", w.Kind)
			if !ok {
				t.Fatalf("kind %s", w.Kind)
			}
			sent := wl.New()
			if err := yaml.UnmarshalStrict(w.YAML, sent); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%s-%d", w.Peer, i)
			meta := sent.(metav1.Object)
			meta.SetName(name)
			meta.SetNamespace("opted")
			meta.SetOwnerReferences(nil) // their owners (a GatewayClass, a Gateway) are not in this API server

			// Some of Envoy Gateway's golden outputs are not valid objects (a privileged container with
			// allowPrivilegeEscalation false): what the API server refuses as the peer wrote it is no pod anyone
			// runs; its takeover is proven offline (internal/inject) and must be refused here for the same reason.
			meta.SetNamespace("plain")
			if _, err := createHere(t, api, sent, true); err != nil {
				t.Logf("refused by the API server as the peer wrote it: %.300s", err)
				mangled := wl.New()
				if err := yaml.UnmarshalStrict(w.YAML, mangled); err != nil {
					t.Fatal(err)
				}
				m, s := templateOf(t, mangled)
				if err := inject.Inject(m, s, injectCfg); err != nil {
					t.Fatal(err)
				}
				mangled.(metav1.Object).SetNamespace("plain")
				mangled.(metav1.Object).SetName(name)
				if _, err := createHere(t, api, mangled, true); err == nil {
					t.Errorf("taken over, the workload the API server refuses is admitted")
				}
				refused++
				return
			}

			// The workload, as its controller would create it: stored as sent (defaulted), with no webhook touching it.
			stored, want := wl.New(), wl.New()
			meta.SetNamespace("opted")
			decode(t, mustCreateHere(t, api, sent, false), stored)
			meta.SetNamespace("plain")
			decode(t, mustCreateHere(t, api, sent, true), want)
			if got, want := specOf(t, stored), specOf(t, want); got != want {
				t.Errorf("the stored %s differs from what was sent (the webhook must mutate pods only):\n got %s\nwant %s", w.Kind, got, want)
			}

			// A pod of its template, as the ReplicaSet or DaemonSet controller would create it: taken over.
			tplMeta, tplSpec := templateOf(t, sent)
			pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: *tplMeta.DeepCopy(), Spec: *tplSpec.DeepCopy()}
			pod.Name, pod.Namespace = name, "opted"
			got := decodePod(t, mustCreateHere(t, api, pod, true))
			st, _, err := inject.ParseStatus(&got.ObjectMeta)
			if err != nil || st.Takeover == nil || string(st.Takeover.Peer) != w.Peer {
				t.Fatalf("the pod was not taken over (status %v, %v)", got.Annotations[inject.AnnotationStatus], err)
			}
			pod.Namespace = "plain"
			admitted := decodePod(t, mustCreateHere(t, api, pod, true))
			if err := inject.Inject(&admitted.ObjectMeta, &admitted.Spec, injectCfg); err != nil {
				t.Fatal(err)
			}
			containerDefaults(&admitted.Spec)
			admitted.Name = got.Name
			assertSamePod(t, got, admitted)

			// inject --takeover, then uninject, as the commands do it.
			in, err := manifest.Manifests(w.YAML, func(m *metav1.ObjectMeta, s *corev1.PodSpec) error { return inject.Inject(m, s, injectCfg) }, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			back, err := manifest.Manifests(in, inject.Uninject, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			orig, again := wl.New(), wl.New()
			if err := yaml.UnmarshalStrict(w.YAML, orig); err != nil {
				t.Fatal(err)
			}
			if err := yaml.UnmarshalStrict(back, again); err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(orig, again) {
				t.Errorf("uninject of inject --takeover is not the workload")
			}
			fmt.Fprintf(&injected, "---\n# %s\n%s\n", w.Source, in)
		})
	}

	// Every injected workload through the API server's strict server-side dry run, in the namespaces they name.
	file := filepath.Join(t.TempDir(), "taken-over.yaml")
	if err := os.WriteFile(file, injected.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	namespaces := api.CreateNamespacesOf(t, file)
	for _, ns := range namespaces {
		serviceAccounts(t, api, workloads, ns)
	}
	if out := api.ApplyDryRun(t, file); strings.Count(out, "(server dry run)") != len(workloads)-refused {
		t.Errorf("the dry run admitted %d objects, want %d:\n%s", strings.Count(out, "(server dry run)"), len(workloads)-refused, out)
	}
	t.Logf("%d workloads taken over on the API server; %d refused by it as their peer wrote them", len(workloads)-refused, refused)
}

// withPodAnnotation is the workload doc with annotation key: value on its pod template.
func withPodAnnotation(t *testing.T, doc []byte, key, value string) []byte {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		t.Fatal(err)
	}
	spec, _ := obj["spec"].(map[string]any)
	tpl, _ := spec["template"].(map[string]any)
	meta, _ := tpl["metadata"].(map[string]any)
	if meta == nil {
		t.Fatal("the workload has no pod template metadata")
	}
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
	}
	annotations[key] = value
	meta["annotations"] = annotations
	out, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// createHere creates obj in the namespace it names (dryRun: as --dry-run=server) as `kubectl create` does, from the
// test's own process (kubetest.Client: this test sends about 250 objects, a kubectl run each cost 0.13 CPU-s), and
// returns what the API server stored (or would store), or its refusal.
func createHere(t *testing.T, api *kubetest.APIServer, obj any, dryRun bool) (string, error) {
	t.Helper()
	b, err := api.Client().Create(t.Context(), "", obj, dryRun)
	return string(b), err
}

// mustCreateHere is createHere that fails t on a refusal.
func mustCreateHere(t *testing.T, api *kubetest.APIServer, obj any, dryRun bool) string {
	t.Helper()
	out, err := createHere(t, api, obj, dryRun)
	if err != nil {
		t.Fatalf("%v (kube-apiserver's log: %s)", err, api.LogDir)
	}
	return out
}

// priorityClasses creates the PriorityClasses the workloads' pods name (the Priority admission plugin refuses a
// pod whose class does not exist).
func priorityClasses(t *testing.T, api *kubetest.APIServer, workloads []peers.Workload) {
	t.Helper()
	seen := map[string]bool{}
	var items []any
	for _, w := range workloads {
		var obj struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(w.YAML, &obj); err != nil {
			t.Fatal(err)
		}
		if pc := obj.Spec.Template.Spec.PriorityClassName; pc != "" && !seen[pc] && !strings.HasPrefix(pc, "system-") {
			seen[pc] = true
			items = append(items, map[string]any{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": map[string]any{"name": pc}, "value": 1000})
		}
	}
	if len(items) > 0 {
		apply(t, api, map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
}

// specOf is the JSON of a stored workload's spec.
func specOf(t *testing.T, obj any) string {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return string(v.Spec)
}

// serviceAccounts creates, in each namespace, the service accounts the workloads' pods run as: no controller
// creates them here, and the ServiceAccount admission plugin refuses a pod whose account does not exist.
func serviceAccounts(t *testing.T, api *kubetest.APIServer, workloads []peers.Workload, namespaces ...string) {
	t.Helper()
	seen := map[string]bool{}
	var items []any
	for _, w := range workloads {
		var obj struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(w.YAML, &obj); err != nil {
			t.Fatal(err)
		}
		sa := obj.Spec.Template.Spec.ServiceAccountName
		for _, ns := range namespaces {
			if sa != "" && !seen[ns+"/"+sa] {
				seen[ns+"/"+sa] = true
				items = append(items, map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": sa, "namespace": ns}})
			}
		}
	}
	if len(items) > 0 {
		apply(t, api, map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	}
}

// templateOf is the pod template of a peer's workload (a Deployment or a DaemonSet, as LookupWorkload's New
// makes them).
func templateOf(t *testing.T, obj any) (*metav1.ObjectMeta, *corev1.PodSpec) {
	t.Helper()
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	case *appsv1.DaemonSet:
		return &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
	}
	t.Fatalf("%T: not a peer's workload", obj)
	return nil, nil
}
