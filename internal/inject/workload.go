package inject

import (
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Workload is one kind of object that holds a pod (template): how to make an empty one to decode into, and
// where its pod is.
type Workload struct {
	APIVersion, Kind string
	New              func() any
	// Pod returns the pod's metadata and spec inside obj (made by New).
	Pod func(obj any) (*metav1.ObjectMeta, *corev1.PodSpec)
}

// workloads is the one table from kind to pod template. The mutation never sees the kind.
var workloads = []Workload{
	{"v1", "Pod", func() any { return &corev1.Pod{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		p := o.(*corev1.Pod)
		return &p.ObjectMeta, &p.Spec
	}},
	{"apps/v1", "Deployment", func() any { return &appsv1.Deployment{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*appsv1.Deployment).Spec.Template)
	}},
	{"apps/v1", "DaemonSet", func() any { return &appsv1.DaemonSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*appsv1.DaemonSet).Spec.Template)
	}},
	{"apps/v1", "StatefulSet", func() any { return &appsv1.StatefulSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*appsv1.StatefulSet).Spec.Template)
	}},
	{"apps/v1", "ReplicaSet", func() any { return &appsv1.ReplicaSet{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*appsv1.ReplicaSet).Spec.Template)
	}},
	{"v1", "ReplicationController", func() any { return &corev1.ReplicationController{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		rc := o.(*corev1.ReplicationController)
		if rc.Spec.Template == nil {
			rc.Spec.Template = &corev1.PodTemplateSpec{}
		}
		return template(rc.Spec.Template)
	}},
	{"batch/v1", "Job", func() any { return &batchv1.Job{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*batchv1.Job).Spec.Template)
	}},
	{"batch/v1", "CronJob", func() any { return &batchv1.CronJob{} }, func(o any) (*metav1.ObjectMeta, *corev1.PodSpec) {
		return template(&o.(*batchv1.CronJob).Spec.JobTemplate.Spec.Template)
	}},
}

// LookupWorkload returns the table's entry for a kind, and whether there is one. apiVersion must match too:
// an old API version of a known kind (extensions/v1beta1 Deployment) is not a workload we can write back.
func LookupWorkload(apiVersion, kind string) (Workload, bool) {
	for _, w := range workloads {
		if w.Kind == kind && w.APIVersion == apiVersion {
			return w, true
		}
	}
	return Workload{}, false
}

// IsWorkloadKind reports whether kind is in the table under any API version.
func IsWorkloadKind(kind string) bool {
	for _, w := range workloads {
		if w.Kind == kind {
			return true
		}
	}
	return false
}

func template(t *corev1.PodTemplateSpec) (*metav1.ObjectMeta, *corev1.PodSpec) {
	return &t.ObjectMeta, &t.Spec
}
