//go:build e2e && linux

package e2e

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// asNativeSidecar rewrites the Envoy Deployment among the objects of text (documents separated by "\n---\n")
// the way meshes run their proxy: Envoy as a native sidecar (an init container with restartPolicy Always) beside
// a main container that does nothing (the e2e's pause image). On deletion kubelet ends the main container first,
// then the sidecar: its preStop hook (our drain) runs then, inside the same grace period. The other objects are
// left as they are.
func asNativeSidecar(text string) (string, error) {
	docs := strings.Split(text, "\n---\n")
	found := false
	for i, doc := range docs {
		if !strings.Contains(doc, "kind: Deployment") {
			continue
		}
		var d appsv1.Deployment
		if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
			return "", fmt.Errorf("reading the Envoy Deployment: %w", err)
		}
		spec := &d.Spec.Template.Spec
		var envoy *corev1.Container
		for j := range spec.Containers {
			if spec.Containers[j].Name == "envoy" {
				envoy = &spec.Containers[j]
			}
		}
		if envoy == nil || len(spec.Containers) != 1 {
			return "", fmt.Errorf("the Envoy Deployment's containers are not just envoy: %d", len(spec.Containers))
		}
		sidecar := *envoy
		sidecar.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
		spec.InitContainers = append(spec.InitContainers, sidecar)
		spec.Containers = []corev1.Container{{
			Name:            "app",
			Image:           PauseImage,
			SecurityContext: envoy.SecurityContext,
		}}
		out, err := yaml.Marshal(&d)
		if err != nil {
			return "", err
		}
		docs[i], found = string(out), true
	}
	if !found {
		return "", fmt.Errorf("no Deployment among the Envoy objects")
	}
	return strings.Join(docs, "\n---\n"), nil
}
