package kubecli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manifest"
)

var update = flag.Bool("update", false, "rewrite the generated deploy/ examples")

// TestInjectCommand: the flags reach the mutation; the output is the golden file the manifest package
// checks for the same settings.
func TestInjectCommand(t *testing.T) {
	old := cli.Version
	cli.Version = "v1.0.0"
	t.Cleanup(func() { cli.Version = old })
	golden := filepath.Join("..", "manifest", "testdata")
	image := "--image=ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0"
	tests := []struct {
		name string
		args []string
	}{
		{"hook", nil},
		{"sidecar-plain-http", []string{"--mode", "sidecar", "--sidecar-kind=plain", "--hook", "http"}},
		{"sidecar-http-token", []string{"--mode=sidecar", "--hook=http", "--token-secret=envoy-drain-token"}},
		{"agent-image-volume", []string{"--mode=agent", "--binary-from=image-volume"}},
		{"image-pull-policy", []string{"--binary-from=image-volume", "--image-pull-policy=Never"}},
		{"flags-drain", []string{"--admin-address=unix:///var/run/envoy/admin.sock", "--drain-delay=2s", "--min-drain-duration=0s", "--quiet-period=1s",
			"--drain-timeout=40s", "--min-open-connections=0", "--count=requests", `--listener-exclude=^listener\.admin2`}},
		{"existing-prestop-replaced", []string{"--replace-hooks"}},
		{"multi-document", nil},
		{"kind-deployment-json", nil}, // JSON in, JSON out
		{"grace-raised-for-deregistration", []string{"--deregistration-delay=2m"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"inject", image, "-f", filepath.Join(golden, tt.name+".in.yaml")}, tt.args...)
			var stdout, stderr bytes.Buffer
			if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			want, err := os.ReadFile(filepath.Join(golden, tt.name+".out.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if stdout.String() != string(want) {
				t.Errorf("output differs from %s.out.yaml:\n%s", tt.name, stdout.String())
			}
			// uninject reads it back into the objects of the input.
			back := runWithStdin(t, stdout.Bytes(), "uninject", "-f", "-")
			again := runWithStdin(t, back, append([]string{"inject", image, "-f", "-"}, tt.args...)...)
			twice := runWithStdin(t, stdout.Bytes(), append([]string{"inject", image, "-f", "-"}, tt.args...)...)
			if !bytes.Equal(again, stdout.Bytes()) || !bytes.Equal(twice, stdout.Bytes()) {
				t.Errorf("inject after uninject, or inject twice, differs from inject once")
			}
		})
	}
}

// TestInjectDeregistrationWarning: a --drain-timeout too short for the --deregistration-delay given is kept, and
// inject says so on stderr with the numbers; a derived one is sized to it, silently.
func TestInjectDeregistrationWarning(t *testing.T) {
	in := filepath.Join("..", "manifest", "testdata", "grace-short.in.yaml")
	for _, tt := range []struct {
		args []string
		want string // in stderr; "" = nothing on stderr
	}{
		{[]string{"--deregistration-delay=2m", "--drain-timeout=1m"}, "shutdown-manager inject: warning: drain timeout 1m0s < the load balancer's deregistration delay 2m0s: " +
			"the drain releases, and Envoy stops, while new connections may still come (want --drain-timeout 2m10s and a grace period of 135s, or no --drain-timeout: inject then sizes both)\n"},
		{[]string{"--deregistration-delay=2m"}, ""},
		{[]string{"--deregistration-delay=1m", "--quiet-period=3s", "--drain-timeout=63s"}, ""},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"inject", "--image=ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0", "-f", in}, tt.args...)
		if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", tt.args, code, stderr.String())
		}
		if stderr.String() != tt.want {
			t.Errorf("%v: stderr\n%q\nwant\n%q", tt.args, stderr.String(), tt.want)
		}
	}
	var stderr bytes.Buffer
	if code := Run(context.Background(), []string{"inject", "--image=r/sm:1", "-f", in, "--deregistration-delay=-1s"}, nil, io.Discard, &stderr); code != ExitUsage {
		t.Errorf("--deregistration-delay=-1s: exit %d (%s), want the usage error", code, stderr.String())
	}
}

// runWithStdin runs the command with stdin from data and returns its stdout.
func runWithStdin(t *testing.T, data []byte, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), args, bytes.NewReader(data), &stdout, &stderr); code != ExitOK {
		t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
	}
	return stdout.Bytes()
}

func TestInjectErrors(t *testing.T) {
	old := cli.Version
	cli.Version = "v1.0.0" // a release: its default image (a development build refuses without --image: TestDefaultImage)
	t.Cleanup(func() { cli.Version = old })
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - {name: app, image: nginx}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stream over manifest.MaxStreamBytes (the deploy example again and again), and one document over
	// manifest.MaxDocumentBytes (a ConfigMap with a large value) after a good one.
	plain, err := os.ReadFile(filepath.Join("..", "..", "deploy", "plain", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	huge := filepath.Join(dir, "huge.yaml")
	stream := bytes.Repeat(append([]byte("---\n"), plain...), manifest.MaxStreamBytes/len(plain)+1)
	if err := os.WriteFile(huge, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	bigDoc := filepath.Join(dir, "bigdoc.yaml")
	big := append(append([]byte(nil), plain...), "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  blob: "...)
	big = append(big, bytes.Repeat([]byte("x"), manifest.MaxDocumentBytes)...)
	if err := os.WriteFile(bigDoc, big, 0o644); err != nil {
		t.Fatal(err)
	}
	noWorkload := filepath.Join(dir, "configmap.yaml")
	if err := os.WriteFile(noWorkload, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inject"}, ExitUsage, "-f"},
		{[]string{"inject", "-f", bad, "--mode", "daemon"}, ExitUsage, `mode: "daemon"`},
		{[]string{"inject", "-f", bad, "--binary-from", "http"}, ExitUsage, "binary source"},
		{[]string{"inject", "-f", bad, "--drain-timeout", "3s"}, ExitUsage, "drain timeout"},
		{[]string{"inject", "-f", bad, "--image", ""}, ExitUsage, "no image"},
		{[]string{"inject", "-f", filepath.Join(dir, "missing.yaml")}, ExitFailure, "reading manifests"},
		{[]string{"inject", "-f", bad}, ExitFailure, "document 2 (Pod p): no Envoy container"},
		{[]string{"uninject"}, ExitUsage, "-f"},
		{[]string{"inject", "-f", huge}, ExitFailure, "over the limit of 32 MiB (too large): inject it in parts"},
		{[]string{"uninject", "-f", huge}, ExitFailure, "over the limit of 32 MiB (too large): inject it in parts"},
		{[]string{"inject", "-f", bigDoc}, ExitFailure, "document 2: over 3 MiB (too large): no API server takes an object that large"},
		{[]string{"inject", "-f", noWorkload}, ExitFailure, "no workload in the manifests"},
		{[]string{"inject", "-f", filepath.Join("..", "manifest", "testdata", "unknown-kind-with-envoy.in.yaml")}, ExitFailure,
			"document 2 (EdgeFleet edge): example.com/v1 EdgeFleet is not a kind inject knows, and it holds an Envoy container (\"proxy\" in spec.pod.spec): give its pod template's path with --template-path example.com/v1/EdgeFleet=spec.pod"},
		{[]string{"uninject", "-f", filepath.Join("..", "manifest", "testdata", "unknown-kind-with-envoy.in.yaml")}, ExitFailure, "--template-path example.com/v1/EdgeFleet=spec.pod"},
		{[]string{"inject", "-f", noWorkload, "--template-path", "EdgeFleet"}, ExitUsage, "want KIND=PATH or APIVERSION/KIND=PATH"},
		{[]string{"inject", "-f", noWorkload, "--template-path", "EdgeFleet=spec..pod"}, ExitUsage, "an empty field"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tt.args, nil, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, stderr naming %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.want)
		}
	}
}

// deployExamples are the generated files under deploy/: inject's output for deploy/plain/envoy.yaml.
var deployExamples = []struct {
	dir  string
	args []string
}{
	{"hook", nil},
	{"sidecar", []string{"--mode=sidecar"}},
	{"agent", []string{"--mode=agent"}},
}

const deployImage = "shutdown-manager:dev"

// TestDeployExamples: each deploy/<mode>/envoy.yaml is exactly what inject writes for deploy/plain/envoy.yaml
// (-update rewrites them; make deploy does that).
func TestDeployExamples(t *testing.T) {
	old := cli.Version
	cli.Version = "dev"
	t.Cleanup(func() { cli.Version = old })
	root := filepath.Join("..", "..", "deploy")
	for _, ex := range deployExamples {
		t.Run(ex.dir, func(t *testing.T) {
			cmd := append([]string{"inject", "--image=" + deployImage}, ex.args...)
			cmd = append(cmd, "-f", "deploy/plain/envoy.yaml")
			var stdout, stderr bytes.Buffer
			args := append(cmd[:len(cmd)-1:len(cmd)-1], filepath.Join(root, "plain", "envoy.yaml"))
			if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			got := "# Generated from deploy/plain/envoy.yaml (where the comments explaining its settings are): below this\n" +
				"# header, exactly what an untagged build (version dev) writes, run at the repository's root:\n" +
				"#   shutdown-manager " + strings.Join(cmd, " ") + "\n" +
				"# Do not edit: make deploy writes it again.\n" + stdout.String()
			path := filepath.Join(root, ex.dir, "envoy.yaml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (make deploy writes it)", err)
			}
			if got != string(want) {
				t.Errorf("%s is not what inject writes for deploy/plain/envoy.yaml (make deploy writes it again):\n%s", path, got)
			}
		})
	}
}

// TestInjectSkipsWorkloadsWithoutEnvoy: in a stream, a workload without Envoy passes through byte for byte
// with a note naming it, while the Envoy workload is injected.
func TestInjectSkipsWorkloadsWithoutEnvoy(t *testing.T) {
	old := cli.Version
	cli.Version = "v1.0.0" // a release: its default image (a development build refuses without --image: TestDefaultImage)
	t.Cleanup(func() { cli.Version = old })
	echo, err := os.ReadFile(filepath.Join("..", "..", "deploy", "common", "echo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := os.ReadFile(filepath.Join("..", "..", "deploy", "plain", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	stream := append(append(append([]byte(nil), echo...), "---\n"...), plain...)
	path := filepath.Join(t.TempDir(), "all.yaml")
	if err := os.WriteFile(path, stream, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), []string{"inject", "-f", path}, nil, &stdout, &stderr); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !bytes.HasPrefix(stdout.Bytes(), echo) {
		t.Errorf("the echo documents did not pass through byte for byte:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), inject.AnnotationStatus) {
		t.Errorf("envoy was not injected:\n%s", stdout.String())
	}
	if want := "document 1 (Deployment echo): no Envoy container"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q does not say %q", stderr.String(), want)
	}
}

// TestInjectTemplatePath: --template-path makes inject and uninject read a kind they do not know, as the
// manifest package's golden case with the same flag.
func TestInjectTemplatePath(t *testing.T) {
	old := cli.Version
	cli.Version = "v1.0.0"
	t.Cleanup(func() { cli.Version = old })
	golden := filepath.Join("..", "manifest", "testdata")
	in, err := os.ReadFile(filepath.Join(golden, "template-path.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(golden, "template-path.out.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--template-path=example.com/v1/EdgeFleet=spec.pod", "--template-path=EdgeFleet=spec.pod"} {
		got := runWithStdin(t, in, "inject", "--image=ghcr.io/envoy-shutdown-manager/shutdown-manager:v1.0.0", flag, "-f", "-")
		if !bytes.Equal(got, want) {
			t.Errorf("%s: output differs from template-path.out.yaml:\n%s", flag, got)
		}
		back := runWithStdin(t, got, "uninject", flag, "-f", "-")
		var a, b any
		if err := yaml.Unmarshal(in, &a); err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(back, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: uninject left:\n%s", flag, back)
		}
	}
}

// TestInjectWarnsBeforeSwitchingModes: re-injecting a file inject wrote in sidecar or agent mode without
// --mode switches it to hook mode, the default; stderr says so and how to keep the mode. Given --mode, or
// on a file not injected yet, there is no warning.
func TestInjectWarnsBeforeSwitchingModes(t *testing.T) {
	root := filepath.Join("..", "..", "deploy")
	for _, tt := range []struct {
		file string
		args []string
		want string // "": no warning
	}{
		{"sidecar", nil, "injected in sidecar mode and is now injected in hook mode, the default (no --mode given); pass --mode=sidecar to keep its mode"},
		{"agent", nil, "injected in agent mode and is now injected in hook mode, the default (no --mode given); pass --mode=agent to keep its mode"},
		{"sidecar", []string{"--mode=sidecar"}, ""},
		{"sidecar", []string{"--mode=hook"}, ""},
		{"hook", nil, ""},
		{"plain", nil, ""},
	} {
		args := append([]string{"inject", "--image=registry.example/shutdown-manager:v1", "-f", filepath.Join(root, tt.file, "envoy.yaml")}, tt.args...)
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr.String())
		}
		switch {
		case tt.want == "" && stderr.Len() != 0:
			t.Errorf("%v: stderr %q, want nothing", args, stderr.String())
		case tt.want != "" && (!strings.Contains(stderr.String(), tt.want) || strings.Count(stderr.String(), "\n") != 1):
			t.Errorf("%v: stderr %q, want one line saying %q", args, stderr.String(), tt.want)
		}
	}
}

// TestDefaultImage: a release build (cli.Version set by -ldflags to the tag) of inject, webhook and policy defaults
// to the image the release workflow publishes for that tag; a development build has no default and refuses with
// one line (exit 2) when --image is not given, so nothing defaults to an image no registry serves.
func TestDefaultImage(t *testing.T) {
	old := cli.Version
	t.Cleanup(func() { cli.Version = old })
	plain := filepath.Join("..", "..", "deploy", "plain", "envoy.yaml")
	for _, v := range []string{"v0.1.0", "v0.2.0-rc.1"} {
		cli.Version = v
		want := "ghcr.io/envoy-shutdown-manager/shutdown-manager:" + v
		var help bytes.Buffer
		Run(context.Background(), []string{"inject", "-h"}, nil, &help, &bytes.Buffer{})
		if !strings.Contains(help.String(), `(default "`+want+`")`) {
			t.Errorf("version %s: inject's --image default is not %s:\n%s", v, want, help.String())
		}
		for _, args := range [][]string{{"inject", "-f", plain}, {"policy"}} {
			var stdout, stderr bytes.Buffer
			if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK || stderr.Len() != 0 {
				t.Errorf("version %s: %v: exit %d, stderr %q; want 0 and nothing on stderr", v, args, code, stderr.String())
			}
			images := regexp.MustCompile(`\bimage[:="\\ ]+([^\s",\\]*shutdown-manager[^\s",\\]*)`).FindAllStringSubmatch(stdout.String(), -1)
			if len(images) == 0 {
				t.Errorf("version %s: %v names no image of ours", v, args)
			}
			for _, m := range images {
				if m[1] != want {
					t.Errorf("version %s: %v names the image %s, want %s", v, args, m[1], want)
				}
			}
		}
	}

	const refusal = "this is a development build (%s): give --image=REGISTRY/NAME:TAG; releases default to ghcr.io/envoy-shutdown-manager/shutdown-manager:vX.Y.Z"
	for _, v := range []string{"dev", "v0.1.0-3-gabcdef0+dirty", "0.1.0"} {
		cli.Version = v
		for _, args := range [][]string{
			{"inject", "-f", plain},
			{"policy"},
			{"webhook", "--tls-cert-file=c", "--tls-key-file=k"},
		} {
			var stdout, stderr bytes.Buffer
			code := Run(context.Background(), args, nil, &stdout, &stderr)
			if want := fmt.Sprintf(refusal, v); code != ExitUsage || stdout.Len() != 0 ||
				!strings.Contains(stderr.String(), want) || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("version %s: %v: exit %d, stdout %q, stderr %q; want exit %d, one line saying %q", v, args, code, stdout.String(), stderr.String(), ExitUsage, want)
			}
		}
		var help bytes.Buffer
		Run(context.Background(), []string{"inject", "-h"}, nil, &help, &bytes.Buffer{})
		if regexp.MustCompile(`(?m)^\s+--image string\n.*\(default `).MatchString(help.String()) {
			t.Errorf("version %s: inject's --image has a default:\n%s", v, help.String())
		}
	}
}

// TestReleaseImageName: the default image's repository is the one the release workflow pushes to (under the
// module's GitHub owner) and the chart's image.repository; the chart in the repository has appVersion dev and no
// tag or digest (its templates refuse to render so: test/chart), and make release sets the appVersion.
func TestReleaseImageName(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(path string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	owner := regexp.MustCompile(`(?m)^module github\.com/([^/]+)/`).FindStringSubmatch(read("go.mod"))
	if owner == nil || ReleaseRepository != "ghcr.io/"+owner[1]+"/shutdown-manager" {
		t.Errorf("ReleaseRepository %s is not ghcr.io/OWNER/shutdown-manager for the module's owner %q", ReleaseRepository, owner)
	}
	wf := read(".github/workflows/release.yml")
	for _, s := range []string{`owner=${GITHUB_REPOSITORY_OWNER,,}`, `IMAGE="ghcr.io/$owner/shutdown-manager:$VERSION"`, "VERSION: ${{ github.ref_name }}"} {
		if !strings.Contains(wf, s) {
			t.Errorf(".github/workflows/release.yml lacks %s: does it still push the image ReleaseRepository names?", s)
		}
	}
	if !strings.Contains(read("scripts/release.sh"), `--app-version "$version"`) {
		t.Error("scripts/release.sh does not package the chart with appVersion = the release")
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct{ Repository, Tag, Digest string } `json:"image"`
	}
	if err := yaml.Unmarshal([]byte(read("charts/shutdown-manager/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(read("charts/shutdown-manager/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != ReleaseRepository || values.Image.Tag != "" || values.Image.Digest != "" || chart.AppVersion != "dev" {
		t.Errorf("the chart's image is %s (tag %q, digest %q, appVersion %s), want %s with no tag or digest and appVersion dev",
			values.Image.Repository, values.Image.Tag, values.Image.Digest, chart.AppVersion, ReleaseRepository)
	}
	// deploy/ names its image explicitly (its headers' --image): the one make image builds untagged.
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "*", "*.yaml"))
	n := 0
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, m := range regexp.MustCompile(`\bimage[:="\\ ]+([^\s",\\]*shutdown-manager[^\s",\\]*)`).FindAllStringSubmatch(string(data), -1) {
			n++
			if m[1] != deployImage {
				t.Errorf("%s names the image %s, want %s", f, m[1], deployImage)
			}
		}
	}
	if n == 0 {
		t.Error("no image of ours found in deploy/")
	}
}

// TestInjectWarnsUnpullableImage: an image with no registry and no repository of its own (shutdown-manager:dev,
// make image's name for a development build) is a warning on stderr of inject and policy, not an error; a registry's image is not.
func TestInjectWarnsUnpullableImage(t *testing.T) {
	plain := filepath.Join("..", "..", "deploy", "plain", "envoy.yaml")
	for _, tt := range []struct {
		args []string
		warn bool
	}{
		{[]string{"inject", "--image=shutdown-manager:dev", "-f", plain}, true},
		{[]string{"inject", "--image=shutdown-manager@sha256:" + strings.Repeat("ab", 32), "-f", plain}, true},
		{[]string{"policy", "--image=shutdown-manager:dev"}, true},
		{[]string{"inject", "--image=registry.example/shutdown-manager:v1", "-f", plain}, false},
		{[]string{"inject", "--image=localhost:5000/shutdown-manager:v1", "-f", plain}, false},
		{[]string{"inject", "--image=example/shutdown-manager:v1", "-f", plain}, false},
		{[]string{"policy", "--image=registry.example/shutdown-manager:v1"}, false},
	} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), tt.args, nil, &stdout, &stderr); code != ExitOK || stdout.Len() == 0 {
			t.Fatalf("%v: exit %d, %d bytes out: %s", tt.args, code, stdout.Len(), stderr.String())
		}
		warned := strings.Contains(stderr.String(), "warning: image ") && strings.Contains(stderr.String(), "names no registry")
		if warned != tt.warn || (tt.warn && strings.Count(stderr.String(), "\n") != 1) {
			t.Errorf("%v: stderr %q; want a one-line warning: %v", tt.args, stderr.String(), tt.warn)
		}
	}
}

// TestDeployHeaders: every generated file under deploy/ says in its header the command that wrote it, and
// that command, run as the header says (at the repository's root, by an untagged build: version dev),
// writes exactly what follows the header.
func TestDeployHeaders(t *testing.T) {
	old := cli.Version
	cli.Version = "dev"
	t.Cleanup(func() { cli.Version = old })
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(root, "deploy", "*", "*.yaml"))
	generated := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if !strings.HasPrefix(text, "# Generated") {
			continue
		}
		generated++
		rel, _ := filepath.Rel(root, f)
		var cmd []string
		body := text
		for strings.HasPrefix(body, "#") {
			line, rest, _ := strings.Cut(body, "\n")
			if c, ok := strings.CutPrefix(line, "#   shutdown-manager "); ok {
				cmd = strings.Fields(c)
			}
			body = rest
		}
		if cmd == nil {
			t.Errorf("%s: its header names no shutdown-manager command", rel)
			continue
		}
		for i, a := range cmd { // paths in the command are from the repository's root
			if strings.HasPrefix(a, "deploy/") {
				cmd[i] = filepath.Join(root, a)
			}
		}
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), cmd, nil, &stdout, &stderr); code != ExitOK {
			t.Errorf("%s: its header's command exits %d: %s", rel, code, stderr.String())
			continue
		}
		if stdout.String() != body {
			t.Errorf("%s: what follows its header is not what its header's command writes (make deploy writes it again):\n%s", rel, stdout.String())
		}
	}
	if generated != len(deployExamples)+1 { // the examples and the policy
		t.Errorf("%d generated files under deploy/, want %d", generated, len(deployExamples)+1)
	}
}
