package inject

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// ServiceAccountDir is where Kubernetes mounts a pod's ServiceAccount token, CA and namespace in each container
// (the ServiceAccount admission plugin), and where the manager reads them to record its Events.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// MountServiceAccount gives the sidecar inject added the pod's ServiceAccount mount, as the other containers
// have it. The API server's ServiceAccount admission plugin adds the token's volume (kube-api-access-…) and
// mounts it into every container present when it runs, which is before the mutating webhooks: a container a
// webhook adds has no token, and the sidecar's Events would be refused for want of one (only logged). The
// mount is copied from the first container that has one whose volume holds a token (the plugin mounts its one
// volume into all of them); a pod with no such mount (automount turned off on the pod or its ServiceAccount)
// gets none here: where the pod turns it off, Inject has given the sidecar a token of the manager's own
// (APIAccessVolume, apiToken). The install init container gets none: it never calls the API.
// A sidecar that already mounts something at ServiceAccountDir is left as it is.
//
// It is for the webhook only, which calls it after Inject. A manifest injected with `shutdown-manager inject`
// needs none of it: its sidecar is in the pod when the plugin runs. Nor does a pod the MutatingAdmissionPolicy
// mutated: the API server runs its in-tree plugins again after the policy's patch, and stores the sidecar (and
// the install container) with the mount (test/policy's TestSameStoredPods compares the mounts).
func MountServiceAccount(spec *corev1.PodSpec) {
	if spec.AutomountServiceAccountToken != nil && !*spec.AutomountServiceAccountToken {
		return
	}
	var sidecar *corev1.Container
	var mount *corev1.VolumeMount
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		for i := range cs {
			c := &cs[i]
			if c.Name == SidecarContainer {
				sidecar = c
				continue
			}
			if mount != nil || c.Name == InstallContainer {
				continue
			}
			if j := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == ServiceAccountDir }); j >= 0 &&
				tokenVolume(spec.Volumes, c.VolumeMounts[j].Name) {
				mount = &c.VolumeMounts[j]
			}
		}
	}
	if sidecar == nil || mount == nil ||
		slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == ServiceAccountDir }) {
		return
	}
	sidecar.VolumeMounts = append(sidecar.VolumeMounts, corev1.VolumeMount{Name: mount.Name, MountPath: ServiceAccountDir, ReadOnly: true})
}

// tokenVolume reports whether the pod's volume named name holds a ServiceAccount token: the projected volume
// the admission plugin adds (a serviceAccountToken source), or a token Secret of a cluster that still mounts
// those.
func tokenVolume(vols []corev1.Volume, name string) bool {
	i := slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == name })
	if i < 0 {
		return false
	}
	switch v := vols[i]; {
	case v.Projected != nil:
		return slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
	case v.Secret != nil:
		return true
	}
	return false
}
