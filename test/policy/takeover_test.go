package policy_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/policy"
)

// TestPeersRefused: the policy does not take over (policy.Generate refuses Takeover), so every Envoy pod that
// Contour and Envoy Gateway render (read from their Go modules) is stored unchanged through it, and the
// refusal is the policy's own matchCondition no-peer-manager: a policy left with that condition alone refuses
// them all too, while it injects a plain Envoy pod (awaitPolicy's probe).
func TestPeersRefused(t *testing.T) {
	if _, _, err := policy.Generate(inject.Config{Image: "x", Takeover: true}); err == nil {
		t.Error("policy.Generate with Takeover: no error, want a refusal")
	}
	workloads := peers.Workloads(t)
	api := kubetest.Start(t)
	if !policyServed(t, api) {
		return
	}
	var pods []corev1.Pod
	accounts := map[string]bool{}
	for i, w := range workloads {
		var obj struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(w.YAML, &obj); err != nil {
			t.Fatalf("%s: %v", w.Source, err)
		}
		tpl := obj.Spec.Template
		p := corev1.Pod{ObjectMeta: tpl.ObjectMeta, Spec: tpl.Spec}
		p.APIVersion, p.Kind = "v1", "Pod"
		p.Name = fmt.Sprintf("%s-%d", w.Peer, i)
		pods = append(pods, p)
		if sa := p.Spec.ServiceAccountName; sa != "" {
			accounts[sa] = true
		}
	}
	plain := "plain-peers"
	createNamespace(t, api, plain, false)
	withAccounts(t, api, plain, pods, accounts)
	var classes []any
	for _, p := range pods {
		if pc := p.Spec.PriorityClassName; pc != "" && !strings.HasPrefix(pc, "system-") {
			classes = append(classes, map[string]any{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": map[string]any{"name": pc}, "value": 1000})
		}
	}
	if len(classes) > 0 {
		apply(t, api, classes)
	}
	// Some of Envoy Gateway's golden outputs are not valid pods (a privileged container with allowPrivilegeEscalation
	// false): what the API server refuses as the peer wrote it is no pod anyone runs, and is left out.
	valid := pods[:0:0]
	var sources []string
	for j, p := range pods {
		if _, err := api.Client().Create(t.Context(), plain, p, true); err != nil {
			t.Logf("%s: refused by the API server as the peer wrote it: %.200s", workloads[j].Source, err)
			continue
		}
		valid = append(valid, p)
		sources = append(sources, workloads[j].Source)
	}
	pods = valid
	t.Logf("%d of %d peer pods admitted as their peer wrote them", len(pods), len(workloads))
	admitted := create(t, api, plain, pods, true)

	for _, tt := range []struct {
		ns   string
		edit func(*admissionv1.MutatingAdmissionPolicy)
	}{
		{"policy-peers", nil},
		{"policy-peers-only-condition", func(mp *admissionv1.MutatingAdmissionPolicy) {
			mp.Spec.MatchConditions = slices.DeleteFunc(mp.Spec.MatchConditions, func(c admissionv1.MatchCondition) bool { return c.Name != "no-peer-manager" })
			if len(mp.Spec.MatchConditions) != 1 {
				t.Fatalf("the policy has no matchCondition no-peer-manager")
			}
		}},
	} {
		t.Run(tt.ns, func(t *testing.T) {
			createNamespace(t, api, tt.ns, true)
			applyPolicyEdited(t, api, inject.Config{Image: "shutdown-manager:policy-test", Version: "test"}, tt.ns, tt.edit)
			stored := create(t, api, tt.ns, withAccounts(t, api, tt.ns, pods, accounts), true)
			for j := range stored {
				if inject.Injected(&stored[j].ObjectMeta) {
					t.Errorf("%s (%s): injected by the policy", pods[j].Name, sources[j])
					continue
				}
				assertSamePod(t, normalize(stored[j]), normalize(admitted[j]))
			}
		})
	}
}

// withAccounts creates the service accounts the pods run as in ns (no controller creates them) and returns pods.
func withAccounts(t *testing.T, api *kubetest.APIServer, ns string, pods []corev1.Pod, accounts map[string]bool) []corev1.Pod {
	t.Helper()
	var objects []any
	for sa := range accounts {
		objects = append(objects, map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": sa, "namespace": ns}})
	}
	if len(objects) > 0 {
		apply(t, api, objects)
	}
	return pods
}
