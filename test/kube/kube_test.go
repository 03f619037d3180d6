// Package kube has a real kube-apiserver (with etcd, from `make kube`) check the project's Kubernetes manifests:
// what the schema of native sidecars, image volumes and security contexts allows is decided by Kubernetes, not by us.
package kube

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manifest"
)

// repoRoot is the repository root, seen from this package's directory (where go test runs it).
const repoRoot = "../.."

// TestHarness checks what the other tests rely on: the API server runs the pinned version, stores objects, grants
// the admin everything, and is gone (processes and files) once the test that started it ends.
func TestHarness(t *testing.T) {
	var api *kubetest.APIServer
	t.Run("running", func(t *testing.T) {
		api = kubetest.Start(t)

		// kubectl is always the newest line's; the API server is the chosen line's ($KUBE_LINE).
		version := api.Version(t)
		want, err := kubetest.PinnedVersion()
		if err != nil {
			t.Fatal(err)
		}
		if version.Server != want || version.Client != pinnedKubernetesVersion(t) {
			t.Errorf("kubectl %s, kube-apiserver %s; want kubectl %s (tools/go.mod) and kube-apiserver %s (the %s line)",
				version.Client, version.Server, pinnedKubernetesVersion(t), want, kubetest.Line())
		}

		if got := strings.TrimSpace(api.Kubectl(t, "auth", "can-i", "*", "*", "--all-namespaces")); got != "yes" {
			t.Errorf("kubectl auth can-i '*' '*' = %q, want yes (the admin token is in system:masters)", got)
		}

		api.Kubectl(t, "create", "configmap", "stored", "--from-literal=key=value")
		t.Cleanup(func() { api.Kubectl(t, "delete", "configmap", "stored") }) // a cleanup may still use the server
		if got := api.Kubectl(t, "get", "configmap", "stored", "-o", "jsonpath={.data.key}"); got != "value" {
			t.Errorf("configmap read back = %q, want %q", got, "value")
		}
		if got := api.Kubectl(t, "get", "serviceaccount", "default", "-o", "name"); strings.TrimSpace(got) != "serviceaccount/default" {
			t.Errorf("default service account = %q, want serviceaccount/default", got)
		}
	})
	if api == nil {
		return // skipped or failed before the server ran
	}

	// The subtest's cleanups have run: nothing may answer on the ports, and the files must be gone.
	for _, u := range []string{api.URL, api.EtcdURL} {
		host := u[strings.Index(u, "//")+2:]
		conn, err := net.Dial("tcp", host)
		if err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after the test ended", u)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("dialling %s after the test ended: %v, want connection refused", u, err)
		}
	}
	if _, err := os.Stat(api.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists after the test ended (stat: %v)", api.Dir, err)
	}
}

// TestBindAddress: Config moves the API server to another address (its certificate and kubeconfig with it) and
// sets its Service range. 127.0.0.2 stands for the node address a full cluster would use: it is loopback too, so
// the test never leaves the machine.
func TestBindAddress(t *testing.T) {
	api := kubetest.StartWith(t, kubetest.Config{BindAddress: "127.0.0.2", ServiceClusterIPRange: "10.97.0.0/24"})
	if !strings.HasPrefix(api.URL, "https://127.0.0.2:") {
		t.Errorf("URL = %s, want https://127.0.0.2:<port>", api.URL)
	}
	if got := api.Kubectl(t, "get", "--raw", "/readyz"); got != "ok" {
		t.Errorf("GET /readyz through the kubeconfig = %q, want ok", got)
	}
	if got := api.Kubectl(t, "get", "service", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"); got != "10.97.0.1" {
		t.Errorf("kubernetes Service ClusterIP = %q, want 10.97.0.1 (the first of ServiceClusterIPRange)", got)
	}
}

// TestPodSchema dry-runs a pod with every feature the injected manifests use, then variants that differ from it in
// one line each and must be refused, by the API server, naming the field: so the server really checks the schema
// of what we send, including fields it does not know (strict field validation).
func TestPodSchema(t *testing.T) {
	api := kubetest.Start(t)
	valid, err := os.ReadFile("testdata/pod.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Before 1.35 the ImageVolume feature gate is off: the server drops volumes[].image without a word
	// (docs/compatibility.md), so the image-volume cases cannot be refused there; the rest of the pod is checked.
	imageVolumes := api.Version(t).Minor >= 35

	t.Run("valid", func(t *testing.T) {
		if got := api.ApplyDryRun(t, "testdata/pod.yaml"); !strings.Contains(got, "pod/envoy created (server dry run)") {
			t.Errorf("kubectl apply --dry-run=server said %q, want pod/envoy created (server dry run)", got)
		}
	})

	for _, tc := range []struct {
		name     string
		old, new string // the one change to testdata/pod.yaml
		want     string // in the API server's refusal: the field it names
	}{{
		name: "sidecar restartPolicy",
		old:  "    restartPolicy: Always\n",
		new:  "    restartPolicy: Sometimes\n",
		want: "spec.initContainers[0].restartPolicy",
	}, {
		name: "image volume without reference",
		old:  "      reference: example.invalid/shutdown-manager:test\n",
		new:  "",
		want: "spec.volumes[0].image.reference",
	}, {
		name: "image volume pullPolicy",
		old:  "      pullPolicy: IfNotPresent\n",
		new:  "      pullPolicy: Sometimes\n",
		want: "spec.volumes[0].image.pullPolicy",
	}, {
		name: "pod seccomp Localhost without a profile",
		old:  "    runAsGroup: 65532\n    seccompProfile:\n      type: RuntimeDefault\n",
		new:  "    runAsGroup: 65532\n    seccompProfile:\n      type: Localhost\n",
		want: "spec.securityContext.seccompProfile.localhostProfile",
	}, {
		name: "negative runAsUser",
		old:  "    runAsUser: 65532\n",
		new:  "    runAsUser: -1\n",
		want: "spec.securityContext.runAsUser",
	}, {
		name: "container capabilities not a list",
		old:  "        drop: [\"ALL\"]\n      seccompProfile:\n        type: RuntimeDefault\n  containers:\n",
		new:  "        drop: ALL\n      seccompProfile:\n        type: RuntimeDefault\n  containers:\n",
		want: "spec.initContainers.securityContext.capabilities.drop of type []v1.Capability",
	}, {
		name: "misspelled field",
		old:  "      readOnlyRootFilesystem: true\n      runAsNonRoot: true\n      capabilities:\n        drop: [\"ALL\"]\n      seccompProfile:\n        type: RuntimeDefault\n  containers:\n",
		new:  "      readOnlyRootFileSystem: true\n      runAsNonRoot: true\n      capabilities:\n        drop: [\"ALL\"]\n      seccompProfile:\n        type: RuntimeDefault\n  containers:\n",
		want: `unknown field "spec.initContainers[0].securityContext.readOnlyRootFileSystem"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.want, "spec.volumes[0].image") && !imageVolumes {
				t.Logf("Kubernetes without image volumes drops the field; the case is covered by TestFeatureMatrix's row")
				return
			}
			if n := strings.Count(string(valid), tc.old); n != 1 {
				t.Fatalf("testdata/pod.yaml has %d copies of %q, want exactly 1", n, tc.old)
			}
			file := filepath.Join(t.TempDir(), "pod.yaml")
			if err := os.WriteFile(file, []byte(strings.Replace(string(valid), tc.old, tc.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := api.DryRun(t.Context(), file)
			if err == nil && tc.name == "sidecar restartPolicy" && !imageVolumes {
				// Kubernetes 1.34 drops a restartPolicy other than Always (its ContainerRestartRules gate is off)
				// instead of refusing it: the pod is stored as one with a plain init container. Checked, not assumed.
				out, err := api.Command(t.Context(), "create", "--dry-run=server", "-f", file, "-o", "jsonpath={.spec.initContainers[0].restartPolicy}").CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("accepted with restartPolicy: Sometimes and stored %q (%v), want the field dropped", out, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("kubectl apply --dry-run=server accepted the pod with %q, want it refused naming %s", strings.TrimSpace(tc.new), tc.want)
			}
			// Refused by the server, not by kubectl, and for the reason we broke it. kubectl shows the server's
			// 422 Invalid as `The Pod "envoy" is invalid: ...` and its other refusals as `Error from server (...)`.
			msg := err.Error()
			fromServer := strings.Contains(msg, `The Pod "envoy" is invalid`) || strings.Contains(msg, "Error from server")
			if !fromServer || !strings.Contains(msg, tc.want) {
				t.Errorf("refused, but not by the server naming %s:\n%v", tc.want, err)
			}
		})
	}
}

// TestManifestsDryRun has the API server accept every manifest the project ships (deploy/) and every golden output
// of the injector (internal/manifest/testdata/*.out.yaml), one subtest per file, named by its path.
func TestManifestsDryRun(t *testing.T) {
	files := manifests(t)
	if len(files) == 0 {
		t.Fatal("no manifests: deploy/**/*.yaml and internal/manifest/testdata/*.out.yaml match nothing")
	}
	api := kubetest.Start(t)
	minor := api.Version(t).Minor
	installCRDs(t, api)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			path := filepath.Join(repoRoot, f)
			if f == "deploy/policy/policy.yaml" && minor < 36 {
				// Before 1.36 no MutatingAdmissionPolicy v1: the server must refuse it, naming the kind.
				if out, err := api.DryRun(t.Context(), path); err == nil || !strings.Contains(err.Error()+out, `no matches for kind "MutatingAdmissionPolicy"`) {
					t.Errorf("Kubernetes 1.%d: %s = %v, %q; want it refused for want of the kind", minor, f, err, out)
				}
				return
			}
			api.CreateNamespacesOf(t, path)
			api.ApplyDryRun(t, path)
			// A custom resource's schema (testdata/crds.yaml) leaves its pod template unchecked: the
			// template inject wrote is checked on its own, as a PodTemplate.
			if templates := customTemplates(t, path); templates != "" {
				api.ApplyDryRun(t, templates)
			}
		})
	}
}

// installCRDs installs testdata/crds.yaml (the custom workloads inject reads, with open schemas) and waits
// until the API server serves them.
func installCRDs(t *testing.T, api *kubetest.APIServer) {
	t.Helper()
	api.Kubectl(t, "apply", "-f", "testdata/crds.yaml")
	api.Kubectl(t, "wait", "--for=condition=Established", "--timeout=60s", "-f", "testdata/crds.yaml")
}

// goldenTemplatePaths are the --template-path flags inject's golden cases use (internal/manifest/golden_test.go).
var goldenTemplatePaths = []string{"example.com/v1/EdgeFleet=spec.pod"}

// customTemplates writes the pod templates of the custom resources in the manifest at path (the kinds of
// internal/manifest's table without an API type, and goldenTemplatePaths) to a file of v1 PodTemplates in the namespace
// default, and returns its path; "" when path holds no custom resource.
func customTemplates(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts := manifest.Options{}
	for _, v := range goldenTemplatePaths {
		w, err := manifest.ParseTemplatePath(v)
		if err != nil {
			t.Fatal(err)
		}
		opts.Workloads = append(opts.Workloads, w)
	}
	custom := false
	for doc := range strings.SplitSeq(string(data), "\n---") {
		var h struct{ APIVersion, Kind string }
		if yaml.Unmarshal([]byte(doc), &h) != nil {
			continue
		}
		if w, ok := manifest.LookupWorkload(h.APIVersion, h.Kind); ok && w.New == nil || h.Kind == "EdgeFleet" {
			custom = true
		}
	}
	if !custom {
		return ""
	}
	var list []any
	_, err = manifest.Transform(bytes.NewReader(data), func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
		list = append(list, corev1.PodTemplate{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PodTemplate"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("template-%d", len(list)), Namespace: "default"},
			Template:   corev1.PodTemplateSpec{ObjectMeta: *meta.DeepCopy(), Spec: *spec.DeepCopy()},
		})
		return nil
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) == 0 {
		return ""
	}
	out, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": list})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "templates.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// manifests returns deploy/**/*.yaml and internal/manifest/testdata/*.out.yaml, relative to the repository root.
func manifests(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "deploy"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".yaml") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("listing deploy/: %v", err)
	}
	golden, err := filepath.Glob(filepath.Join(repoRoot, "internal/manifest/testdata/*.out.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, golden...)
	for i, f := range files {
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files[i] = filepath.ToSlash(rel)
	}
	return files
}

// pinnedKubernetesVersion is k8s.io/kubernetes's version in tools/go.mod, which the binaries are built from.
func pinnedKubernetesVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "tools/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require ")); len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1]
		}
	}
	t.Fatal("no k8s.io/kubernetes version in tools/go.mod")
	return ""
}
