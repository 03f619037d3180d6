// Package chart checks the Helm chart charts/shutdown-manager with the real Helm (pinned in tools/go.mod) and a
// real kube-apiserver: lint, golden `helm template` outputs, a server-side dry run of every golden value set, and
// real installs and upgrades.
package chart

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.yaml and the values table of the chart's README")

const (
	// repoRoot is the repository root, seen from this package's directory (where go test runs it).
	repoRoot = "../.."
	// chartDir is the chart under test, as it sits in the repository (appVersion dev). The tests render and install
	// it as make release packages it (helm.chart, at releaseVersion); TestRepositoryChartNeedsImage renders it as is.
	chartDir = repoRoot + "/charts/shutdown-manager"
	// releaseVersion is the release the chart is packaged as for the tests: its appVersion, and so the tag of its
	// default image.
	releaseVersion = "v0.1.0"
	// helmScript builds Helm and knows its cache directory.
	helmScript = repoRoot + "/scripts/helm-binary.sh"
	// envHelm names the environment variable that, when set, is the helm binary to run instead of the cached one.
	envHelm = "HELM_BIN"
	// helmTimeout bounds one helm command; an install against the test API server takes a few seconds.
	helmTimeout = 2 * time.Minute
	// namespace is where every release of these tests goes.
	namespace = "shutdown-manager"
)

// helm runs the pinned Helm with a configuration, cache and data directory of its own (nothing read from or written
// to the user's); commands that talk to an API server are given its --kubeconfig.
type helm struct {
	bin  string
	home string
	// chart is chartDir packaged as make release packages it (scripts/release.sh: version releaseVersion without
	// the v, appVersion releaseVersion), so its image defaults to the one that release publishes.
	chart string
}

// newHelm finds the helm binary: $HELM_BIN, else the cache of scripts/helm-binary.sh. Without it the test fails
// when CI is "true" (CI must never pass by not testing) and is skipped otherwise; both say how to build it.
func newHelm(tb testing.TB) *helm {
	tb.Helper()
	bin, err := helmBinary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true and no helm: %v", err)
		}
		tb.Skipf("no helm: %v", err)
	}
	h := &helm{bin: bin, home: tb.TempDir()}
	dist := tb.TempDir()
	h.must(tb, "package", chartDir, "--version", strings.TrimPrefix(releaseVersion, "v"), "--app-version", releaseVersion, "--destination", dist)
	h.chart = filepath.Join(dist, "shutdown-manager-"+strings.TrimPrefix(releaseVersion, "v")+".tgz")
	return h
}

func helmBinary() (string, error) {
	if bin := os.Getenv(envHelm); bin != "" {
		if err := executable(bin); err != nil {
			return "", fmt.Errorf("$%s: %w", envHelm, err)
		}
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "bash", helmScript, "--print-dir")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("asking %s for its cache directory: %w: %s", helmScript, err, strings.TrimSpace(stderr.String()))
	}
	bin := filepath.Join(strings.TrimSpace(string(out)), "helm")
	if err := executable(bin); err != nil {
		return "", fmt.Errorf("%w: build it with `make helm`, or set $%s", err, envHelm)
	}
	return bin, nil
}

func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// run runs helm with args and returns its standard output; the error holds the command line and its standard error.
func (h *helm) run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(h.home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(h.home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(h.home, "data"),
	)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// must is run that fails tb on an error.
func (h *helm) must(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := h.run(args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// valueSet is one set of values the chart is rendered with: a golden file each.
type valueSet struct {
	name    string // testdata/values/<name>.yaml (none for "default") and testdata/golden/<name>.yaml
	release string
	// generated says the output holds a certificate the chart generates at each render, which the golden file
	// replaces with a placeholder (see normalize).
	generated bool
	// setFiles are --set-file arguments (key=path).
	setFiles []string
	// verbatim is a file whose objects the output of templates/policy.yaml must be, unchanged; the golden file
	// shows them as one placeholder document: the file is another test's golden (deploy/policy/policy.yaml), and a
	// change there must not fail this one.
	verbatim string
}

// policyManifest is what `shutdown-manager policy` writes for the default settings (make deploy keeps it current).
const policyManifest = repoRoot + "/deploy/policy/policy.yaml"

var valueSets = []valueSet{
	{name: "default", release: "shutdown-manager", generated: true},
	{name: "existing-secret", release: "shutdown-manager"},
	{name: "cert-manager", release: "shutdown-manager"},
	{name: "cert-manager-issuer", release: "shutdown-manager"},
	{name: "custom", release: "edge", generated: true},
	{name: "monitoring", release: "shutdown-manager", generated: true},
	{name: "policy", release: "shutdown-manager", setFiles: []string{"policy.manifest=" + policyManifest}, verbatim: policyManifest},
}

// templateArgs are the arguments of `helm template` of chart for vs.
func (vs valueSet) templateArgs(chart string) []string {
	return append([]string{"template", vs.release, chart, "--namespace", namespace}, vs.valueArgs()...)
}

// valueArgs are the flags that give vs's values to a helm command.
func (vs valueSet) valueArgs() []string {
	var args []string
	if vs.name != "default" {
		args = append(args, "--values", filepath.Join("testdata", "values", vs.name+".yaml"))
	}
	for _, f := range vs.setFiles {
		args = append(args, "--set-file", f)
	}
	return args
}

// generatedPEM matches the values of a certificate the chart generates: a new one at every render.
var generatedPEM = regexp.MustCompile(`(?m)^(\s*(?:ca\.crt|tls\.crt|tls\.key|caBundle): )[A-Za-z0-9+/=]{64,}$`)

// normalize replaces generated certificates with a placeholder, so that a golden file shows where they go and
// stays the same from one render to the next. TestGeneratedCertificate checks what they hold.
func normalize(out string) string {
	return generatedPEM.ReplaceAllString(out, "${1}GENERATED")
}

func TestLint(t *testing.T) {
	h := newHelm(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			out := h.must(t, append([]string{"lint", "--strict", h.chart, "--namespace", namespace}, vs.valueArgs()...)...)
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Errorf("helm lint said:\n%s\nwant 0 chart(s) failed", out)
			}
		})
	}
}

// TestGolden renders each value set and compares it with testdata/golden/<name>.yaml (-update rewrites them): the
// diff of a golden file is the review of a change to the chart.
func TestGolden(t *testing.T) {
	h := newHelm(t)
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			got := h.must(t, vs.templateArgs(h.chart)...)
			if vs.generated {
				got = normalize(got)
			}
			if vs.verbatim != "" {
				got = replaceVerbatim(t, got, vs.verbatim)
			}
			golden := filepath.Join("testdata", "golden", vs.name+".yaml")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./test/chart -run TestGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("helm %s differs from %s (go test ./test/chart -run TestGolden -update rewrites it):\n%s",
					strings.Join(vs.templateArgs(h.chart), " "), golden, lineDiff(string(want), got))
			}
		})
	}
}

// policySource is the line helm puts above each document that templates/policy.yaml rendered.
const policySource = "# Source: shutdown-manager/templates/policy.yaml"

// replaceVerbatim checks that the documents of out that templates/policy.yaml rendered are the objects of file, in
// order and unchanged, and replaces them with one placeholder document.
func replaceVerbatim(t *testing.T, out, file string) string {
	t.Helper()
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []any
	for _, doc := range strings.Split("\n"+string(content), "\n---\n") {
		if strings.TrimSpace(stripComments(doc)) != "" {
			want = append(want, decodeAny(t, doc))
		}
	}
	var kept []string
	placed := false
	for _, doc := range strings.Split(out, "\n---\n") {
		if !strings.Contains(doc, policySource) {
			kept = append(kept, doc)
			continue
		}
		got = append(got, decodeAny(t, doc))
		if !placed {
			kept = append(kept, policySource+"\n# the objects of "+strings.TrimPrefix(file, repoRoot+"/")+", unchanged (replaceVerbatim)")
			placed = true
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("templates/policy.yaml rendered %d objects that are not those of %s (%d)", len(got), file, len(want))
	}
	return strings.Join(kept, "\n---\n")
}

func decodeAny(t *testing.T, doc string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("decoding %q: %v", firstLines(doc, 3), err)
	}
	return v
}

// TestGoldenFilesHaveValueSets: every golden file and values file belongs to a value set of the table (a renamed
// case must not leave a stale golden file that nothing checks).
func TestGoldenFilesHaveValueSets(t *testing.T) {
	known := map[string]bool{}
	for _, vs := range valueSets {
		known[vs.name] = true
	}
	for _, dir := range []string{"testdata/golden", "testdata/values"} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			if name := strings.TrimSuffix(e.Name(), ".yaml"); !known[name] {
				t.Errorf("%s/%s belongs to no value set of valueSets", dir, e.Name())
			}
		}
	}
}

// TestPolicyModeNeedsManifest: mode policy installs the output of `shutdown-manager policy` and nothing else: without
// it, or with something else, the chart refuses to render rather than install a policy that does not inject.
func TestPolicyModeNeedsManifest(t *testing.T) {
	h := newHelm(t)
	notPolicy := filepath.Join(t.TempDir(), "not-policy.yaml")
	if err := os.WriteFile(notPolicy, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no manifest", nil, "mode policy needs policy.manifest"},
		{"not a policy", []string{"--set-file", "policy.manifest=" + notPolicy}, "holds no MutatingAdmissionPolicy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "shutdown-manager", h.chart, "--namespace", namespace, "--set", "mode=policy"}, tc.args...)
			out, err := h.run(args...)
			if err == nil {
				t.Fatalf("helm template succeeded, want a refusal; it rendered:\n%s", firstLines(out, 10))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template: %v\nwant an error saying %q", err, tc.want)
			}
		})
	}
}

// TestSecretNeedsCA: certificates.source=secret without certificates.caBundle, where the Secret's ca.crt cannot be
// read (helm template; a cluster without the Secret), refuses to render with one line naming what to set: a
// MutatingWebhookConfiguration without a caBundle would fail every admission open, leaving pods uninjected.
func TestSecretNeedsCA(t *testing.T) {
	h := newHelm(t)
	out, err := h.run("template", "shutdown-manager", h.chart, "--namespace", namespace,
		"--set", "certificates.source=secret,certificates.secretName=webhook-serving")
	if err == nil {
		t.Fatalf("rendered without a CA, want a refusal; it rendered:\n%s", firstLines(out, 5))
	}
	// helm's error is one "Error: …" line (then its usual hint about --debug).
	var errs []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, "Error: ") {
			errs = append(errs, l)
		}
	}
	want := "certificates.source=secret needs the webhook's CA: set certificates.caBundle (base64 PEM), or install into the cluster where Secret " + namespace + "/webhook-serving has ca.crt"
	if len(errs) != 1 || !strings.Contains(errs[0], want) {
		t.Errorf("helm template: %v\nwant one error line saying %q", err, want)
	}
}

// TestKubeVersionRefusals renders the chart for given Kubernetes versions (helm template --kube-version, as helm
// install does with the cluster's own): below the oldest supported line the chart refuses (Chart.yaml kubeVersion),
// and each feature with a later minimum refuses below it with one line that says what to use instead. The same
// refusals on a real 1.34 API server, and the successes on the newest line, are in kube_test.go.
func TestKubeVersionRefusals(t *testing.T) {
	h := newHelm(t)
	policy := []string{"--set", "mode=policy", "--set-file", "policy.manifest=" + policyManifest}
	imageVolume := []string{"--set", "inject.binaryFrom=image-volume"}
	for _, tc := range []struct {
		version, what string
		args          []string
		want          string // in helm's error; "" renders
	}{
		{"1.33.9", "default", nil, "chart requires kubeVersion: >= 1.34.0-0 which is incompatible with Kubernetes v1.33.9"},
		{"1.34.0", "default", nil, ""},
		{"1.34.12", "image-volume", imageVolume, "inject.binaryFrom=image-volume needs Kubernetes >= 1.35 (image volumes); this cluster is v1.34.12"},
		{"1.35.0", "image-volume", imageVolume, ""},
		{"1.34.12", "policy", policy, "mode=policy needs Kubernetes >= 1.36 (MutatingAdmissionPolicy admissionregistration.k8s.io/v1); this cluster is v1.34.12"},
		{"1.35.4", "policy", policy, "mode=policy needs Kubernetes >= 1.36"},
		{"1.36.0", "policy", policy, ""},
	} {
		t.Run(tc.version+"/"+tc.what, func(t *testing.T) {
			args := append([]string{"template", "shutdown-manager", h.chart, "--namespace", namespace, "--kube-version", tc.version}, tc.args...)
			out, err := h.run(args...)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Kubernetes %s: %v; want it rendered", tc.version, err)
			case tc.want != "" && err == nil:
				t.Errorf("Kubernetes %s rendered, want a refusal saying %q; it rendered:\n%s", tc.version, tc.want, firstLines(out, 5))
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Kubernetes %s: %v\nwant an error saying %q", tc.version, err, tc.want)
			}
		})
	}
}

// TestSchemaRefuses: values.schema.json refuses values the chart cannot render correctly, naming the value.
func TestSchemaRefuses(t *testing.T) {
	h := newHelm(t)
	for _, tc := range []struct {
		set  string
		want string // in helm's error
	}{
		{"mode=sidecar", "mode"},
		{"inject.mode=daemon", "mode"},
		{"inject.binaryFrom=download", "binaryFrom"},
		{"inject.drainDelay=5 seconds", "drainDelay"},
		{"inject.count=bytes", "count"},
		{"inject.port=0", "port"},
		{"webhook.failurePolicy=Retry", "failurePolicy"},
		{"webhook.timeoutSeconds=31", "timeoutSeconds"},
		{"webhook.reinvocationPolicy=Always", "reinvocationPolicy"},
		{"certificates.source=vault", "source"},
		{"certificates.source=secret", "secretName"},
		{"image.digest=latest", "digest"},
		{"typo=1", "typo"},
		{"events.namespaces[0]=Not_A_Namespace", "namespaces"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			out, err := h.run("template", "shutdown-manager", h.chart, "--namespace", namespace, "--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered, want a schema error; it rendered:\n%s", tc.set, firstLines(out, 5))
			}
			if msg := err.Error(); !strings.Contains(msg, "schema") || !strings.Contains(msg, tc.want) {
				t.Errorf("--set %s: %v\nwant a schema error naming %s", tc.set, err, tc.want)
			}
		})
	}
}

// lineDiff is a short, line-based account of how got differs from want: the first differing lines with their
// numbers (the golden files are long; the full diff is `git diff` after -update).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 10; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, wl, gl)
			shown++
		}
	}
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
