package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubetest"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testpki"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/webhook"
)

// testImage is the image the webhook under test injects (nothing pulls it: no kubelet runs).
const testImage = "shutdown-manager:webhook-test"

// MissingStatusTemplate lists, one per line, the pods kubectl prints that lack the status annotation: after a
// webhook outage with failurePolicy Ignore, the opted-in pods created without the manager. docs/webhook.md gives it
// (test/docs TestPageCommands checks it is this one).
const missingStatusTemplate = `{{range .items}}{{if not (and .metadata.annotations (index .metadata.annotations "` + inject.AnnotationStatus + `"))}}` +
	`{{.metadata.namespace}}/{{.metadata.name}}{{"\n"}}{{end}}{{end}}`

// TestWebhook runs `shutdown-manager webhook` (the real command, in this process) behind a real kube-apiserver
// that calls it through a MutatingWebhookConfiguration holding the test CA, and reads back what the API server
// stored for objects created with kubectl.
func TestWebhook(t *testing.T) {
	api := kubetest.Start(t)
	ca, err := testpki.NewCA("shutdown-manager webhook test CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := newCertDir(t, ca)
	wh := startWebhook(t, certs, api.Kubeconfig)
	hook := hookConfig{url: "https://" + wh.listen + webhook.Path, caBundle: ca.PEM, failurePolicy: admissionregistrationv1.Ignore}
	apply(t, api, hook.object())

	for _, ns := range []string{"opted", "plain"} {
		apply(t, api, namespaceList(ns))
	}
	api.Kubectl(t, "label", "namespace", "opted", inject.LabelInject+"="+inject.InjectEnabled)
	apply(t, api, namespaceList(metav1.NamespaceSystem)) // its default service account: no controller-manager creates it

	template := plainTemplate(t)
	envoy := func(name string, edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: *template.ObjectMeta.DeepCopy(),
			Spec:       *template.Spec.DeepCopy(),
		}
		p.Name = name
		if edit != nil {
			edit(p)
		}
		return p
	}
	// expected is what the webhook must store for pod: inject.Inject applied to the pod as the API server has it
	// when it calls the webhooks, that is after its built-in mutations (defaults, the service account token
	// volume appended by the ServiceAccount admission plugin), which a dry run without webhooks gives.
	expected := func(t *testing.T, pod *corev1.Pod) *corev1.Pod {
		t.Helper()
		p := pod.DeepCopy()
		p.Namespace, p.Name, p.GenerateName = "plain", "", "expected-"
		delete(p.Labels, inject.LabelInject)
		admitted := decodePod(t, create(t, api, p, "--dry-run=server").stdout)
		if err := inject.Inject(&admitted.ObjectMeta, &admitted.Spec, inject.Config{Image: testImage, Version: cli.Version}); err != nil {
			t.Fatal(err)
		}
		inject.MountServiceAccount(&admitted.Spec) // as the webhook does after Inject (a sidecar's token mount)
		containerDefaults(&admitted.Spec)
		return admitted
	}

	t.Run("opted-in namespace: pods stored injected as inject writes them", func(t *testing.T) {
		bare := envoy("bare", nil)
		fromRS := envoy("", func(p *corev1.Pod) { // what the ReplicaSet controller would create
			p.GenerateName = "envoy-5d9c7-"
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "envoy-5d9c7",
				UID: "6b1c3f1e-0000-4000-8000-000000000001", Controller: new(true), BlockOwnerDeletion: new(true)}}
		})
		for _, pod := range []*corev1.Pod{bare, fromRS} {
			pod.Namespace = "opted"
			got := decodePod(t, create(t, api, pod).stdout)
			want := expected(t, pod)
			assertSamePod(t, got, want)
		}
	})

	t.Run("pods as people build them: stored as inject writes them", func(t *testing.T) {
		native := envoy("native-sidecar", func(p *corev1.Pod) { // Envoy as a mesh runs its proxy
			e := p.Spec.Containers[0]
			e.RestartPolicy = new(corev1.ContainerRestartPolicyAlways)
			p.Spec.InitContainers = append(p.Spec.InitContainers, e)
			p.Spec.Containers = []corev1.Container{{Name: "app", Image: "example.com/app:v1"}}
		})
		longest := envoy("grace-longest", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64(math.MaxInt64)) })
		overDuration := envoy("grace-over-duration", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = new(int64(9223372037)) })
		for _, pod := range []*corev1.Pod{native, longest, overDuration} {
			pod.Namespace = "opted"
			got := decodePod(t, create(t, api, pod).stdout)
			if !inject.Injected(&got.ObjectMeta) {
				t.Errorf("pod %s not injected", pod.Name)
			}
			assertSamePod(t, got, expected(t, pod))
		}
	})

	t.Run("every drain setting by annotation, and the token: stored as inject writes them, the status recording each", func(t *testing.T) {
		annotated := func(name string, extra map[string]string) *corev1.Pod {
			return envoy(name, func(p *corev1.Pod) {
				p.Namespace = "opted"
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				for _, d := range inject.DrainSettings {
					p.Annotations[d.Annotation()] = d.Example
				}
				for k, v := range extra {
					p.Annotations[k] = v
				}
				// The settings' example admin address is a unix socket in /var/run/envoy: Envoy keeps it in a volume
				// of its own, as it must for a sidecar to reach it (inject mounts that volume into the sidecar).
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "envoy-admin",
					VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
				p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
					corev1.VolumeMount{Name: "envoy-admin", MountPath: "/var/run/envoy"})
			})
		}
		hook := annotated("every-setting", nil)
		other := annotated("every-setting-other", map[string]string{inject.Prefix + "min-drain-duration": "20s"})
		token := annotated("every-setting-token", map[string]string{
			inject.AnnotationMode: string(inject.ModeSidecar), inject.AnnotationHook: string(inject.HookHTTP), inject.AnnotationTokenSecret: "envoy-drain-token"})
		var statuses []inject.Status
		for _, pod := range []*corev1.Pod{hook, other, token} {
			got := decodePod(t, create(t, api, pod).stdout)
			assertSamePod(t, got, expected(t, pod))
			st, ok, err := inject.ParseStatus(&got.ObjectMeta)
			if !ok || err != nil {
				t.Fatalf("pod %s: no status: %v", pod.Name, err)
			}
			statuses = append(statuses, st)
		}
		for _, d := range inject.DrainSettings {
			if got := statuses[0].Settings[d.Name]; !d.Derived && got != d.Example {
				t.Errorf("status settings[%s] = %q, want %q", d.Name, got, d.Example)
			}
		}
		if got := statuses[1].Settings["min-drain-duration"]; got != "20s" {
			t.Errorf("the pod annotated min-drain-duration 20s has status settings[min-drain-duration] = %q", got)
		}
		if got := statuses[2].Settings["token-secret"]; got != "envoy-drain-token" {
			t.Errorf("the pod with a token has status settings[token-secret] = %q", got)
		}
	})

	t.Run("opted-in namespace: dry run injects too (sideEffects None)", func(t *testing.T) {
		pod := envoy("dry", func(p *corev1.Pod) { p.Namespace = "opted" })
		got := decodePod(t, create(t, api, pod, "--dry-run=server").stdout)
		if !inject.Injected(&got.ObjectMeta) {
			t.Errorf("dry run not injected: %v", got.Annotations)
		}
	})

	t.Run("pod label opts in anywhere but kube-system", func(t *testing.T) {
		pod := envoy("labelled", func(p *corev1.Pod) {
			p.Namespace = "plain"
			p.Labels[inject.LabelInject] = inject.InjectEnabled
		})
		got := decodePod(t, create(t, api, pod).stdout)
		assertSamePod(t, got, expected(t, pod))
	})

	t.Run("Deployment stored unchanged (the webhook mutates pods)", func(t *testing.T) {
		d := plainDeployment(t)
		d.Namespace = "opted"
		var got appsv1.Deployment
		decode(t, create(t, api, d).stdout, &got)
		if inject.Injected(&got.Spec.Template.ObjectMeta) || len(got.Spec.Template.Spec.InitContainers) > 0 {
			t.Errorf("stored Deployment's template was mutated: %v, %d init containers", got.Spec.Template.Annotations, len(got.Spec.Template.Spec.InitContainers))
		}
	})

	untouched := []struct {
		name string
		pod  *corev1.Pod
	}{
		{"namespace not opted in", envoy("elsewhere", func(p *corev1.Pod) { p.Namespace = "plain" })},
		{"kube-system, even with the pod label", envoy("system", func(p *corev1.Pod) {
			p.Namespace = metav1.NamespaceSystem
			p.Labels[inject.LabelInject] = inject.InjectEnabled
		})},
		{"the shutdown manager's own pod", envoy("own", func(p *corev1.Pod) {
			p.Namespace = "opted"
			p.Labels[inject.LabelName] = inject.OwnName
		})},
		{"opted out by annotation", envoy("opted-out", func(p *corev1.Pod) {
			p.Namespace = "opted"
			p.Annotations = map[string]string{inject.AnnotationInject: inject.InjectFalse}
		})},
		{"no Envoy, opted in by the namespace only", envoy("app", func(p *corev1.Pod) {
			p.Namespace = "opted"
			p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = "app", "nginx:1.29"
		})},
	}
	for _, tt := range untouched {
		t.Run("untouched: "+tt.name, func(t *testing.T) {
			out := create(t, api, tt.pod)
			got := decodePod(t, out.stdout)
			if inject.Injected(&got.ObjectMeta) || len(got.Spec.InitContainers) > 0 || got.Spec.Containers[0].Lifecycle != nil {
				t.Errorf("pod was mutated: annotations %v, init containers %d", got.Annotations, len(got.Spec.InitContainers))
			}
			if out.stderr != "" {
				t.Errorf("kubectl warned: %s", out.stderr)
			}
		})
	}

	t.Run("opted in but not injectable: admitted unchanged with a warning and an Event", func(t *testing.T) {
		pod := envoy("no-envoy", func(p *corev1.Pod) {
			p.Namespace = "plain"
			p.Labels[inject.LabelInject] = inject.InjectEnabled
			p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = "app", "nginx:1.29"
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7f8",
				UID: "6b1c3f1e-0000-4000-8000-000000000002", Controller: new(true)}}
		})
		out := create(t, api, pod)
		got := decodePod(t, out.stdout)
		if inject.Injected(&got.ObjectMeta) || len(got.Spec.InitContainers) > 0 {
			t.Errorf("pod was mutated: %v", got.Annotations)
		}
		if want := "Warning: shutdown-manager: pod not injected: no Envoy container"; !strings.Contains(out.stderr, want) {
			t.Errorf("kubectl's stderr %q does not contain %q", out.stderr, want)
		}
		if log := wh.logText(t); !strings.Contains(log, `"reason":"ShutdownManagerNotInjected","owner_kind":"ReplicaSet","owner_namespace":"plain","owner_name":"web-7f8"`) {
			t.Errorf("the webhook's log (%s) has no Event for ReplicaSet plain/web-7f8", wh.logPath)
		}
		// And the Event itself, in the API server, on the owner (the Events client sends it off the admission's path).
		var events string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			events = api.Kubectl(t, "get", "events.events.k8s.io", "-n", "plain", "-o",
				`jsonpath={range .items[*]}{.reason} {.regarding.kind}/{.regarding.name} {.type}{"\n"}{end}`)
			if strings.Contains(events, "ShutdownManagerNotInjected ReplicaSet/web-7f8 Warning") {
				return
			}
			select {
			case <-t.Context().Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		t.Errorf("no ShutdownManagerNotInjected Event on ReplicaSet plain/web-7f8 in the API server; events:\n%s", events)
	})

	t.Run("reinvocation: another webhook adds a container after ours", func(t *testing.T) {
		other := startAddingWebhook(t, ca)
		apply(t, api, other.object())
		t.Cleanup(func() { api.Kubectl(t, "delete", "mutatingwebhookconfiguration", other.name) })
		pod := envoy("reinvoked", func(p *corev1.Pod) {
			p.Namespace = "opted"
			p.Labels[addContainerLabel] = "yes"
		})
		got := decodePod(t, create(t, api, pod).stdout)
		withAdded := pod.DeepCopy()
		withAdded.Spec.Containers = append(withAdded.Spec.Containers, addedContainer)
		assertSamePod(t, got, expected(t, withAdded))
		if n := len(got.Spec.Containers); n != 2 {
			t.Errorf("%d containers, want envoy and %s", n, addedContainer.Name)
		}
	})

	t.Run("a review of another kind: the API server reports the webhook's error", func(t *testing.T) {
		// A configuration wrongly sending ConfigMaps, with failurePolicy Fail so that the error reaches kubectl.
		wrong := hook.object().(*admissionregistrationv1.MutatingWebhookConfiguration)
		wrong.Name = "wrong-kind"
		wrong.Webhooks = wrong.Webhooks[:1]
		wrong.Webhooks[0].Name = "wrong-kind.shutdown-manager.io"
		wrong.Webhooks[0].Rules[0].Resources = []string{"configmaps"}
		wrong.Webhooks[0].FailurePolicy = new(admissionregistrationv1.Fail)
		apply(t, api, wrong)
		t.Cleanup(func() { api.Kubectl(t, "delete", "mutatingwebhookconfiguration", wrong.Name) })
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := api.Command(ctx, "create", "configmap", "sent-by-mistake", "-n", "opted").CombinedOutput()
		want := "got kind ConfigMap v1, resource configmaps v1: only pods (v1 Pod) are mutated"
		if err == nil || !strings.Contains(string(out), want) {
			t.Errorf("kubectl create configmap: %v: %s\nwant a failure quoting %q", err, out, want)
		}
		t.Logf("kubectl: %s", out)
	})

	t.Run("certificate rotated on disk: no failed admission", func(t *testing.T) {
		// failurePolicy Fail for this test: a failed call would fail the kubectl create instead of hiding.
		strict := hook
		strict.failurePolicy = admissionregistrationv1.Fail
		apply(t, api, strict.object())
		t.Cleanup(func() { apply(t, api, hook.object()) })
		before := wh.servedSerial(t, ca)
		for i := range 2 {
			pod := envoy(fmt.Sprintf("before-rotation-%d", i), func(p *corev1.Pod) { p.Namespace = "opted" })
			if got := decodePod(t, create(t, api, pod).stdout); !inject.Injected(&got.ObjectMeta) {
				t.Errorf("%s not injected", pod.Name)
			}
		}
		next := certs.rotate(t)
		if next.String() == before {
			t.Fatal("the new certificate has the old serial")
		}
		// Admissions go on while the webhook notices the new files (within webhook.DefaultCertInterval).
		deadline := time.Now().Add(30 * time.Second)
		for i := 0; wh.servedSerial(t, ca) != next.String(); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("the webhook still serves serial %s 30 s after the rotation to %s (log: %s)", wh.servedSerial(t, ca), next, wh.logPath)
			}
			pod := envoy(fmt.Sprintf("during-rotation-%d", i), func(p *corev1.Pod) { p.Namespace = "opted" })
			if got := decodePod(t, create(t, api, pod).stdout); !inject.Injected(&got.ObjectMeta) {
				t.Errorf("%s not injected", pod.Name)
			}
		}
		for i := range 2 {
			pod := envoy(fmt.Sprintf("after-rotation-%d", i), func(p *corev1.Pod) { p.Namespace = "opted" })
			if got := decodePod(t, create(t, api, pod).stdout); !inject.Injected(&got.ObjectMeta) {
				t.Errorf("%s not injected", pod.Name)
			}
		}
	})

	t.Run("webhook down, failurePolicy Ignore: pods created uninjected, and visible", func(t *testing.T) {
		wh.stop(t)
		apply(t, api, namespaceList("outage"))
		api.Kubectl(t, "label", "namespace", "outage", inject.LabelInject+"="+inject.InjectEnabled)
		pod := envoy("during-outage", func(p *corev1.Pod) { p.Namespace = "outage" })
		got := decodePod(t, create(t, api, pod).stdout)
		if inject.Injected(&got.ObjectMeta) {
			t.Errorf("pod injected with the webhook down")
		}
		metrics := api.Kubectl(t, "get", "--raw", "/metrics")
		want := `apiserver_admission_webhook_fail_open_count{name="namespace.shutdown-manager.io",type="admit"}`
		if !strings.Contains(metrics, want) {
			t.Errorf("the API server's /metrics has no %s", want)
		}
		list := api.Kubectl(t, "get", "pods", "-n", "outage", "-o", "go-template="+missingStatusTemplate)
		if list != "outage/during-outage\n" {
			t.Errorf("pods without the status annotation = %q, want outage/during-outage", list)
		}
	})
}

// assertSamePod compares what matters of two stored pods: annotations and spec (the service account token
// volume, which the API server names with a random suffix, under one name).
func assertSamePod(t *testing.T, got, want *corev1.Pod) {
	t.Helper()
	if !inject.Injected(&got.ObjectMeta) {
		t.Errorf("pod %s stored without the status annotation: %v", got.Name, got.Annotations)
	}
	for _, p := range []*corev1.Pod{got, want} {
		sameTokenVolume(&p.Spec)
	}
	if !equality.Semantic.DeepEqual(got.Annotations, want.Annotations) {
		t.Errorf("pod %s: annotations\n%v\nwant (inject's)\n%v", got.Name, got.Annotations, want.Annotations)
	}
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		g, _ := json.MarshalIndent(got.Spec, "", " ")
		w, _ := json.MarshalIndent(want.Spec, "", " ")
		t.Errorf("pod %s: stored spec\n%s\nwant (inject's, over the pod as admitted)\n%s", got.Name, g, w)
	}
}

// containerDefaults sets the defaults the API server gives the containers and volumes a webhook added (it
// decodes the patched object again, with defaulting): the ones this test's images, the http hook's probe and the
// token's Secret volume get.
func containerDefaults(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			c := &cs[i]
			if c.TerminationMessagePath == "" {
				c.TerminationMessagePath = corev1.TerminationMessagePathDefault
			}
			if c.TerminationMessagePolicy == "" {
				c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
			}
			if c.ImagePullPolicy == "" && !strings.HasSuffix(c.Image, ":latest") {
				c.ImagePullPolicy = corev1.PullIfNotPresent
			}
			if p := c.LivenessProbe; p != nil { // the http hook's sidecar
				if p.TimeoutSeconds == 0 {
					p.TimeoutSeconds = 1
				}
				if p.SuccessThreshold == 0 {
					p.SuccessThreshold = 1
				}
				if p.HTTPGet != nil && p.HTTPGet.Scheme == "" {
					p.HTTPGet.Scheme = corev1.URISchemeHTTP
				}
			}
		}
	}
	for i := range spec.Volumes { // the token's Secret (the http hook with a token)
		if v := spec.Volumes[i].Secret; v != nil && v.DefaultMode == nil {
			v.DefaultMode = new(corev1.SecretVolumeSourceDefaultMode)
		}
	}
}

// sameTokenVolume renames the kube-api-access-<random> volume and its mounts kube-api-access.
func sameTokenVolume(spec *corev1.PodSpec) {
	const prefix = "kube-api-access-"
	for i := range spec.Volumes {
		if strings.HasPrefix(spec.Volumes[i].Name, prefix) {
			spec.Volumes[i].Name = prefix
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			for j := range cs[i].VolumeMounts {
				if strings.HasPrefix(cs[i].VolumeMounts[j].Name, prefix) {
					cs[i].VolumeMounts[j].Name = prefix
				}
			}
		}
	}
}

// runningWebhook is `shutdown-manager webhook` running in this process.
type runningWebhook struct {
	listen, health string
	logPath        string
	cancel         context.CancelFunc
	done           chan int
	once           sync.Once
}

// startWebhook runs the webhook command (with extra flags) on ports of 127.0.0.1 it chooses, and waits for its
// "webhook serving" log line, which says them. The cleanup stops it.
func startWebhook(t *testing.T, certs *certDir, kubeconfig string, extra ...string) *runningWebhook {
	t.Helper()
	w := &runningWebhook{logPath: filepath.Join(t.TempDir(), "webhook.log"), done: make(chan int, 1)}
	logFile, err := os.Create(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan map[string]any, 1)
	out := &lineWatcher{w: logFile, match: `"msg":"webhook serving"`, found: started}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		args := []string{"webhook", "--listen", "127.0.0.1:0", "--health-listen", "127.0.0.1:0",
			"--tls-cert-file", certs.cert, "--tls-key-file", certs.key, "--kubeconfig", kubeconfig, "--image", testImage, "--log-level", "debug"}
		w.done <- kubecli.Run(ctx, append(args, extra...), nil, io.Discard, out)
	}()
	t.Cleanup(func() {
		w.stop(t)
		logFile.Close()
		if t.Failed() {
			t.Logf("the webhook's log: %s", w.logPath)
		}
	})
	select {
	case rec := <-started:
		w.listen, _ = rec["listen"].(string)
		w.health, _ = rec["health_listen"].(string)
	case code := <-w.done:
		w.done <- code
		t.Fatalf("the webhook exited with %d before serving; log: %s", code, w.logPath)
	case <-time.After(time.Minute):
		t.Fatalf("the webhook did not serve within a minute; log: %s", w.logPath)
	}
	resp, err := http.Get("http://" + w.health + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
	return w
}

// stop ends the webhook (as SIGTERM would) and waits for it to exit; it must exit 0.
func (w *runningWebhook) stop(t *testing.T) {
	w.once.Do(func() {
		w.cancel()
		select {
		case code := <-w.done:
			if code != 0 {
				t.Errorf("the webhook exited with %d; log: %s", code, w.logPath)
			}
		case <-time.After(time.Minute):
			t.Errorf("the webhook did not stop within a minute; log: %s", w.logPath)
		}
	})
}

func (w *runningWebhook) logText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(w.logPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// servedSerial is the serial of the certificate the webhook presents to a new connection, checked against ca.
func (w *runningWebhook) servedSerial(t *testing.T, ca *testpki.CA) string {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	conn, err := tls.Dial("tcp", w.listen, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS handshake with the webhook: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// lineWatcher writes to w and sends the first JSON log line containing match, decoded, on found.
type lineWatcher struct {
	mu    sync.Mutex
	w     io.Writer
	match string
	found chan map[string]any
	sent  bool
}

func (l *lineWatcher) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.sent && bytes.Contains(p, []byte(l.match)) {
		var rec map[string]any
		if json.Unmarshal(p, &rec) == nil {
			l.found <- rec
			l.sent = true
		}
	}
	return l.w.Write(p)
}

// certDir holds the webhook's certificate and key files.
type certDir struct {
	ca        *testpki.CA
	cert, key string
}

func newCertDir(t *testing.T, ca *testpki.CA) *certDir {
	dir := t.TempDir()
	c := &certDir{ca: ca, cert: filepath.Join(dir, "tls.crt"), key: filepath.Join(dir, "tls.key")}
	c.rotate(t)
	return c
}

// rotate writes a new serving certificate for 127.0.0.1 the way a Secret volume changes (each file replaced by a
// rename, never half-written), and returns its serial.
func (c *certDir) rotate(t *testing.T) fmt.Stringer {
	t.Helper()
	leaf, err := c.ca.Leaf([]net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	for path, b := range map[string][]byte{c.key: leaf.KeyPEM, c.cert: leaf.CertPEM} {
		if err := os.WriteFile(path+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".new", path); err != nil {
			t.Fatal(err)
		}
	}
	return leaf.Serial
}

// hookConfig is the MutatingWebhookConfiguration the chart installs, pointed at a URL.
type hookConfig struct {
	url           string
	caBundle      []byte
	failurePolicy admissionregistrationv1.FailurePolicyType
}

// object: two webhooks, one selecting opted-in namespaces, one opted-in pods; both exclude kube-system and the
// shutdown manager's own pods.
func (h hookConfig) object() any {
	notSystem := metav1.LabelSelectorRequirement{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{metav1.NamespaceSystem}}
	notOwn := metav1.LabelSelectorRequirement{Key: inject.LabelName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{inject.OwnName}}
	optedIn := metav1.LabelSelectorRequirement{Key: inject.LabelInject, Operator: metav1.LabelSelectorOpIn, Values: []string{inject.InjectEnabled}}
	entry := func(name string, ns, obj []metav1.LabelSelectorRequirement) admissionregistrationv1.MutatingWebhook {
		return admissionregistrationv1.MutatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &h.url, CABundle: h.caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:           &h.failurePolicy,
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          new(int32(5)),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      new(admissionregistrationv1.IfNeededReinvocationPolicy),
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: ns},
			ObjectSelector:          &metav1.LabelSelector{MatchExpressions: obj},
		}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: "shutdown-manager"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			entry("namespace.shutdown-manager.io", []metav1.LabelSelectorRequirement{optedIn, notSystem}, []metav1.LabelSelectorRequirement{notOwn}),
			entry("pod.shutdown-manager.io", []metav1.LabelSelectorRequirement{notSystem}, []metav1.LabelSelectorRequirement{optedIn, notOwn}),
		},
	}
}

// The other webhook of the reinvocation test adds this container to pods labelled addContainerLabel=yes.
const addContainerLabel = "test.shutdown-manager.io/add-container"

var addedContainer = corev1.Container{Name: "added-later", Image: "busybox:1.37", Command: []string{"sleep", "infinity"}}

type addingWebhook struct {
	name string
	url  string
	ca   []byte
}

// startAddingWebhook serves a second mutating webhook: it appends addedContainer when the pod lacks it. Its
// configuration's name sorts after "shutdown-manager", so the API server calls it after ours.
func startAddingWebhook(t *testing.T, ca *testpki.CA) addingWebhook {
	leaf, err := ca.Leaf([]net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
			http.Error(w, "bad pod", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		has := false
		for _, c := range pod.Spec.Containers {
			has = has || c.Name == addedContainer.Name
		}
		if !has {
			patch, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/containers/-", "value": addedContainer}})
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
		review.Response, review.Request = resp, nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return addingWebhook{name: "zz-adds-a-container", url: srv.URL + "/", ca: ca.PEM}
}

func (a addingWebhook) object() any {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: a.name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "adds-a-container.test.shutdown-manager.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &a.url, CABundle: a.ca},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			FailurePolicy:           new(admissionregistrationv1.Fail),
			SideEffects:             new(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: addContainerLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"yes"}}}},
		}},
	}
}

// namespaceList is a namespace with its default service account (no controller-manager runs to create it).
func namespaceList(name string) any {
	return map[string]any{"apiVersion": "v1", "kind": "List", "items": []any{
		map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}},
		map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default", "namespace": name}},
		// deploy/plain's pods run as the ServiceAccount envoy (deploy/common/envoy-events-rbac.yaml).
		map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "envoy", "namespace": name}},
	}}
}

// plainDeployment is deploy/plain/envoy.yaml: Envoy without the manager.
func plainDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "plain", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		t.Fatalf("decoding deploy/plain/envoy.yaml: %v", err)
	}
	return &d
}

func plainTemplate(t *testing.T) corev1.PodTemplateSpec {
	return plainDeployment(t).Spec.Template
}

type kubectlOutput struct{ stdout, stderr string }

// create runs `kubectl create -o json -f -` on obj with extra args; stderr holds the API server's warnings.
func create(t *testing.T, api *kubetest.APIServer, obj any, extra ...string) kubectlOutput {
	t.Helper()
	return kubectlStdin(t, api, obj, append([]string{"create", "-o", "json", "-f", "-"}, extra...)...)
}

func apply(t *testing.T, api *kubetest.APIServer, obj any) {
	t.Helper()
	kubectlStdin(t, api, obj, "apply", "-f", "-")
}

func kubectlStdin(t *testing.T, api *kubetest.APIServer, obj any, args ...string) kubectlOutput {
	t.Helper()
	in, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := api.Command(ctx, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return kubectlOutput{stdout.String(), stderr.String()}
}

func decodePod(t *testing.T, s string) *corev1.Pod {
	t.Helper()
	var p corev1.Pod
	decode(t, s, &p)
	return &p
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("decoding kubectl's output: %v\n%s", err, s)
	}
}
