package manifest

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Workload is one kind of object that holds a pod (template): where its pod template is, and for the
// Kubernetes kinds, the type to check the whole object against.
type Workload struct {
	APIVersion string // "" (a --template-path given by kind alone): any
	Kind       string
	// Template is the path to the pod template (an object with the pod's metadata and spec); empty for a
	// Pod, whose own metadata and spec are its pod's.
	Template []string
	// New makes an empty object of the kind's API type, into which the whole object is decoded strictly
	// (an unknown field is an error); nil for a custom resource, of which only the pod template is read
	// (strictly, as a PodTemplateSpec): its own schema is its CRD's, which inject does not have.
	New func() any
}

// workloads is the one table from kind to pod template. The mutation never sees the kind.
var workloads = []Workload{
	{"v1", "Pod", nil, func() any { return &corev1.Pod{} }},
	{"apps/v1", "Deployment", specTemplate, func() any { return &appsv1.Deployment{} }},
	{"apps/v1", "DaemonSet", specTemplate, func() any { return &appsv1.DaemonSet{} }},
	{"apps/v1", "StatefulSet", specTemplate, func() any { return &appsv1.StatefulSet{} }},
	{"apps/v1", "ReplicaSet", specTemplate, func() any { return &appsv1.ReplicaSet{} }},
	{"v1", "ReplicationController", specTemplate, func() any { return &corev1.ReplicationController{} }},
	{"batch/v1", "Job", specTemplate, func() any { return &batchv1.Job{} }},
	{"batch/v1", "CronJob", []string{"spec", "jobTemplate", "spec", "template"}, func() any { return &batchv1.CronJob{} }},
	{"v1", "PodTemplate", []string{"template"}, func() any { return &corev1.PodTemplate{} }},
	// Custom resources people run Envoy with: Argo Rollouts, OpenKruise's CloneSet, Advanced StatefulSet
	// (v1beta1, and v1alpha1 that Kruise still serves) and Advanced DaemonSet.
	{"argoproj.io/v1alpha1", "Rollout", specTemplate, nil},
	{"apps.kruise.io/v1alpha1", "CloneSet", specTemplate, nil},
	{"apps.kruise.io/v1beta1", "StatefulSet", specTemplate, nil},
	{"apps.kruise.io/v1alpha1", "StatefulSet", specTemplate, nil},
	{"apps.kruise.io/v1alpha1", "DaemonSet", specTemplate, nil},
}

var specTemplate = []string{"spec", "template"}

// records are kinds that hold a copy of a pod template without being a workload: a controller's record of a
// workload's past revisions (apps/v1 ControllerRevision, written by the DaemonSet and StatefulSet
// controllers, never applied by people). They pass through unchanged even when the copy holds an Envoy.
var records = []Workload{{APIVersion: "apps/v1", Kind: "ControllerRevision"}}

func isRecord(apiVersion, kind string) bool {
	return slices.ContainsFunc(records, func(w Workload) bool { return w.APIVersion == apiVersion && w.Kind == kind })
}

// LookupWorkload returns the table's entry for a kind, and whether there is one. apiVersion must match too:
// an old API version of a known kind (extensions/v1beta1 Deployment) is not a workload we can write back.
func LookupWorkload(apiVersion, kind string) (Workload, bool) {
	return lookupWorkload(nil, apiVersion, kind)
}

// lookupWorkload looks a kind up in extra (--template-path), then in the table.
func lookupWorkload(extra []Workload, apiVersion, kind string) (Workload, bool) {
	for _, w := range extra {
		if w.Kind == kind && (w.APIVersion == "" || w.APIVersion == apiVersion) {
			return w, true
		}
	}
	for _, w := range workloads {
		if w.Kind == kind && w.APIVersion == apiVersion {
			return w, true
		}
	}
	return Workload{}, false
}

// Workloads returns the table of known workloads (a copy).
func Workloads() []Workload { return slices.Clone(workloads) }

// IsWorkloadKind reports whether kind is in the table under any API version.
func IsWorkloadKind(kind string) bool {
	for _, w := range workloads {
		if w.Kind == kind {
			return true
		}
	}
	return false
}

// ParseTemplatePath reads the value of --template-path: KIND=PATH or APIVERSION/KIND=PATH, PATH the pod
// template's field path with dots (spec.template, spec.jobTemplate.spec.template), or "." when the object's
// own metadata and spec are the pod's. Such a kind is read as a custom resource (only its pod template is
// decoded), and is looked up before the table: a flag can move a known kind's template.
func ParseTemplatePath(v string) (Workload, error) {
	kind, path, ok := strings.Cut(v, "=")
	if !ok || kind == "" || path == "" {
		return Workload{}, fmt.Errorf("%q: want KIND=PATH or APIVERSION/KIND=PATH, such as argoproj.io/v1alpha1/Rollout=spec.template", v)
	}
	var w Workload
	if i := strings.LastIndex(kind, "/"); i >= 0 {
		w.APIVersion, w.Kind = kind[:i], kind[i+1:]
		if w.APIVersion == "" || w.Kind == "" {
			return Workload{}, fmt.Errorf("%q: want KIND=PATH or APIVERSION/KIND=PATH", v)
		}
	} else {
		w.Kind = kind
	}
	if path != "." {
		w.Template = strings.Split(path, ".")
		for _, f := range w.Template {
			if f == "" {
				return Workload{}, fmt.Errorf("%q: an empty field in the path %q", v, path)
			}
		}
	}
	return w, nil
}

// templateFlag is how --template-path names a kind's template at path (for messages).
func templateFlag(apiVersion, kind string, path []string) string {
	p := strings.Join(path, ".")
	if p == "" {
		p = "."
	}
	return fmt.Sprintf("--template-path %s/%s=%s", apiVersion, kind, p)
}
