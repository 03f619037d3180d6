package webhook

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestCreatesPods: the audit follows only the entries of a configuration that the API server calls for a CREATE of
// a core/v1 pod, wildcards included.
func TestCreatesPods(t *testing.T) {
	rule := func(ops []admissionregistrationv1.OperationType, groups, versions, resources []string) admissionregistrationv1.RuleWithOperations {
		return admissionregistrationv1.RuleWithOperations{Operations: ops,
			Rule: admissionregistrationv1.Rule{APIGroups: groups, APIVersions: versions, Resources: resources}}
	}
	create := []admissionregistrationv1.OperationType{admissionregistrationv1.Create}
	for _, tt := range []struct {
		name  string
		rules []admissionregistrationv1.RuleWithOperations
		want  bool
	}{
		{"the chart's", []admissionregistrationv1.RuleWithOperations{rule(create, []string{""}, []string{"v1"}, []string{"pods"})}, true},
		{"wildcards", []admissionregistrationv1.RuleWithOperations{rule([]admissionregistrationv1.OperationType{admissionregistrationv1.OperationAll}, []string{"*"}, []string{"*"}, []string{"*"})}, true},
		{"second rule", []admissionregistrationv1.RuleWithOperations{
			rule(create, []string{"apps"}, []string{"v1"}, []string{"deployments"}),
			rule(create, []string{""}, []string{"v1"}, []string{"pods"})}, true},
		{"every resource and subresource", []admissionregistrationv1.RuleWithOperations{rule(create, []string{""}, []string{"v1"}, []string{"*/*"})}, true},
		{"update only", []admissionregistrationv1.RuleWithOperations{rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}, []string{""}, []string{"v1"}, []string{"pods"})}, false},
		{"a subresource", []admissionregistrationv1.RuleWithOperations{rule(create, []string{""}, []string{"v1"}, []string{"pods/binding"})}, false},
		{"another group", []admissionregistrationv1.RuleWithOperations{rule(create, []string{"apps"}, []string{"v1"}, []string{"pods"})}, false},
		{"none", nil, false},
	} {
		if got := createsPods(tt.rules); got != tt.want {
			t.Errorf("%s: createsPods = %t, want %t", tt.name, got, tt.want)
		}
	}
}

// TestSelector: a selector left out selects everything, as the API server has an entry without one; an empty one
// too; the chart's select what they say.
func TestSelector(t *testing.T) {
	for _, tt := range []struct {
		name string
		sel  *metav1.LabelSelector
		set  labels.Set
		want bool
	}{
		{"nil", nil, labels.Set{"a": "b"}, true},
		{"empty", &metav1.LabelSelector{}, labels.Set{}, true},
		{"opted in", &metav1.LabelSelector{MatchLabels: map[string]string{"shutdown-manager.io/inject": "enabled"}},
			labels.Set{"shutdown-manager.io/inject": "enabled"}, true},
		{"not opted in", &metav1.LabelSelector{MatchLabels: map[string]string{"shutdown-manager.io/inject": "enabled"}},
			labels.Set{}, false},
		{"kube-system", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name",
			Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system"}}}}, labels.Set{"kubernetes.io/metadata.name": "kube-system"}, false},
	} {
		s, err := selector(tt.sel)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := s.Matches(tt.set); got != tt.want {
			t.Errorf("%s: selector %q matches %v = %t, want %t", tt.name, s, tt.set, got, tt.want)
		}
	}
}
