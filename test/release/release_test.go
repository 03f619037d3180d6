// Package release checks `make release` (scripts/release.sh) as a whole: two runs on one commit write
// byte-identical release directories, and what they hold is the release it names. It runs in make test's
// integration tier (Go, git and Helm from scripts/helm-binary.sh; about a minute warm).
package release

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
)

// version is a pre-release, so that the test also checks the SemVer pattern takes one and the chart's version
// drops the v.
const version = "v0.0.0-test.1"

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// release runs scripts/release.sh into dist and returns its stderr. RELEASE_ALLOW_DIRTY: a developer's tree
// with changes is what is being tested.
func release(t *testing.T, dist, version string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "./scripts/release.sh", version)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "DIST="+dist, "RELEASE_ALLOW_DIRTY=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	return stderr.String(), err
}

func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReleaseIsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: does not build two releases")
	}
	tmp := t.TempDir()
	first, second := filepath.Join(tmp, "first"), filepath.Join(tmp, "second")
	for _, dist := range []string{first, second} {
		if log, err := release(t, dist, version); err != nil {
			t.Fatalf("scripts/release.sh %s: %v\n%s", version, err, log)
		}
	}
	a, b := files(t, first), files(t, second)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range a {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		if !bytes.Equal(a[n], b[n]) {
			t.Errorf("%s differs between two releases of one commit", n)
		}
	}
	if len(a) != len(b) {
		t.Errorf("the releases hold %d and %d files", len(a), len(b))
	}
	t.Logf("%d files, byte-identical twice", len(a))

	// What the release holds: every file the docs list, each in SHA256SUMS.
	for _, want := range []string{
		"shutdown-manager-linux-amd64", "shutdown-manager-linux-arm64", "image-linux-amd64.tar", "image-linux-arm64.tar",
		"image-oci/index.json", "shutdown-manager-0.0.0-test.1.tgz", "shutdown-manager-" + version + ".spdx.json", "SHA256SUMS",
		"shutdown-manager-pod-linux-amd64", "shutdown-manager-pod-linux-arm64", "cluster-image-linux-amd64.tar",
		"cluster-image-linux-arm64.tar", "cluster-image-oci/index.json",
	} {
		if _, ok := a[want]; !ok {
			t.Errorf("the release lacks %s (it has %v)", want, names)
		}
	}
	for _, n := range names {
		if n != "SHA256SUMS" && !bytes.Contains(a["SHA256SUMS"], []byte("  "+n+"\n")) {
			t.Errorf("SHA256SUMS does not list %s", n)
		}
	}

	// The pod binary, copied into every Envoy pod, keeps within its budget (image.PodBuildFlags: issue 26).
	for _, arch := range []string{"amd64", "arm64"} {
		if n := len(a["shutdown-manager-pod-linux-"+arch]); n == 0 || n > podBinaryBudget {
			t.Errorf("shutdown-manager-pod-linux-%s is %d bytes, over its budget of %d (or missing)", arch, n, podBinaryBudget)
		} else {
			t.Logf("shutdown-manager-pod-linux-%s: %d bytes (budget %d)", arch, n, podBinaryBudget)
		}
	}

	// The binaries name the release and the commit they were built from.
	rev, err := exec.Command("git", "-C", repoRoot(t), "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		for _, bin := range []string{"shutdown-manager-linux-", "shutdown-manager-pod-linux-"} {
			out, err := exec.Command(filepath.Join(first, bin+runtime.GOARCH), "version", "-o", "json").Output()
			if err != nil {
				t.Fatalf("%s version -o json: %v", bin+runtime.GOARCH, err)
			}
			var got struct{ Version, Commit string }
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("version -o json printed %q: %v", out, err)
			}
			if got.Version != version || got.Commit != strings.TrimSpace(string(rev)) {
				t.Errorf("the released %s says %s, want version %s and commit %s", bin+runtime.GOARCH, out, version, rev)
			}
		}
	}

	// With no image named, the released binary injects the pod image the release workflow publishes for this
	// release, and the packaged chart injects the same and runs the release's cluster image; the docker archives
	// carry those names (ctr images import).
	wantImage := "ghcr.io/envoy-shutdown-manager/shutdown-manager:" + version
	wantClusterImage := "ghcr.io/envoy-shutdown-manager/shutdown-manager-cluster:" + version
	if runtime.GOOS == "linux" && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") {
		out, err := exec.Command(filepath.Join(first, "shutdown-manager-linux-"+runtime.GOARCH), "inject", "-f",
			filepath.Join(repoRoot(t), "deploy/plain/envoy.yaml")).Output()
		if err != nil {
			t.Fatalf("the released binary's inject without --image: %v", err)
		}
		if !strings.Contains(string(out), "image: "+wantImage+"\n") {
			t.Errorf("the released binary's inject without --image does not inject %s:\n%s", wantImage, out)
		}
	}
	rendered, err := exec.Command(helmBinary(t), "template", "shutdown-manager", filepath.Join(first, "shutdown-manager-0.0.0-test.1.tgz")).Output()
	if err != nil {
		t.Fatalf("helm template of the packaged chart without image values: %v", err)
	}
	for _, want := range []string{"image: " + wantClusterImage + "\n", `"--image=` + wantImage + `"`} {
		if !strings.Contains(string(rendered), want) {
			t.Errorf("the packaged chart, rendered without image values, lacks %s", want)
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		if !bytes.Contains(a["image-linux-"+arch+".tar"], []byte(`"RepoTags":["`+wantImage+`"]`)) {
			t.Errorf("image-linux-%s.tar is not named %s", arch, wantImage)
		}
		if !bytes.Contains(a["cluster-image-linux-"+arch+".tar"], []byte(`"RepoTags":["`+wantClusterImage+`"]`)) {
			t.Errorf("cluster-image-linux-%s.tar is not named %s", arch, wantClusterImage)
		}
	}

	// The chart's version is the release's without the v; its appVersion (the image tag) is the release.
	chart, err := exec.Command("tar", "-xzOf", filepath.Join(first, "shutdown-manager-0.0.0-test.1.tgz"), "shutdown-manager/Chart.yaml").Output()
	if err != nil {
		t.Fatalf("reading the packaged Chart.yaml: %v", err)
	}
	for _, want := range []string{"\nversion: 0.0.0-test.1\n", "\nappVersion: " + version + "\n"} {
		if !strings.Contains("\n"+string(chart), want) {
			t.Errorf("the packaged Chart.yaml lacks %q:\n%s", strings.TrimSpace(want), chart)
		}
	}

	// The SBOM describes both binaries by the checksums SHA256SUMS gives them.
	var sbom struct {
		Packages []struct {
			PackageFileName string
			Checksums       []struct{ ChecksumValue string }
		}
	}
	if err := json.Unmarshal(a["shutdown-manager-"+version+".spdx.json"], &sbom); err != nil {
		t.Fatal(err)
	}
	described := 0
	for _, p := range sbom.Packages {
		if p.PackageFileName == "" {
			continue
		}
		described++
		if len(p.Checksums) != 1 || !bytes.Contains(a["SHA256SUMS"], []byte(p.Checksums[0].ChecksumValue+"  "+p.PackageFileName+"\n")) {
			t.Errorf("the SBOM's %s checksum %v is not SHA256SUMS's", p.PackageFileName, p.Checksums)
		}
	}
	if described != 4 { // the full CLI and the pod binary, each for amd64 and arm64
		t.Errorf("the SBOM describes %d binaries, want 4", described)
	}

	t.Run("push", func(t *testing.T) { checkPush(t, first) })
}

// checkPush pushes a release as docs/release.md says, to a registry the test starts (go-containerregistry's,
// in process, plain HTTP): the image with make image-push LAYOUT=, the chart with helm push. What comes back is
// what dist holds: the layout's index by digest, the chart's package byte for byte.
func checkPush(t *testing.T, dist string) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	ref := host + "/platform/shutdown-manager:" + version
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "image-push", "IMAGE="+ref, "LAYOUT="+filepath.Join(dist, "image-oci"))
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make image-push: %v\n%s", err, out)
	}
	idx, err := image.ReadLayout(filepath.Join(dist, "image-oci"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if !strings.HasSuffix(strings.TrimSpace(string(out)), "@"+want.String()) {
		t.Errorf("make image-push printed %q, want the layout's index %s", out, want)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("the registry has index %s under %s, the layout %s", got, ref, want)
	}

	helm := helmBinary(t)
	home := t.TempDir() // Helm's registry config and cache, away from the user's
	helmEnv := append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache", "HELM_DATA_HOME="+home+"/data")
	pkg := filepath.Join(dist, "shutdown-manager-0.0.0-test.1.tgz")
	cmd = exec.CommandContext(t.Context(), helm, "push", pkg, "oci://"+host+"/platform/charts", "--plain-http")
	cmd.Env = helmEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm push: %v\n%s", err, out)
	}
	pullDir := t.TempDir()
	cmd = exec.CommandContext(t.Context(), helm, "pull", "oci://"+host+"/platform/charts/shutdown-manager",
		"--version", "0.0.0-test.1", "--plain-http", "-d", pullDir)
	cmd.Env = helmEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm pull: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(pullDir, "shutdown-manager-0.0.0-test.1.tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if wantPkg, _ := os.ReadFile(pkg); !bytes.Equal(got, wantPkg) {
		t.Error("helm pull gave back another package than the one pushed")
	}
}

// helmBinary is the pinned Helm (scripts/helm-binary.sh builds it once, as make release does).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmDir, err := exec.Command(filepath.Join(repoRoot(t), "scripts/helm-binary.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/helm-binary.sh: %v", err)
	}
	return filepath.Join(strings.TrimSpace(string(helmDir)), "helm")
}

// TestReleaseNeedsSemanticVersion: an untagged build's version (dev) is no release, nor is a release the
// CHANGELOG has no notes for.
func TestReleaseNeedsSemanticVersion(t *testing.T) {
	for v, reason := range map[string]string{
		"dev": "is not a semantic version", "0.1.0": "is not a semantic version", "v0.1": "is not a semantic version",
		"v01.0.0": "is not a semantic version", "": "is not a semantic version",
		"v99.0.0": "CHANGELOG.md has no section '## [99.0.0] - YYYY-MM-DD'",
	} {
		dist := filepath.Join(t.TempDir(), "dist")
		log, err := release(t, dist, v)
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(log, reason) {
			t.Errorf("release %q: %v\n%s\nwant exit 2 saying %q", v, err, log, reason)
		}
		if _, err := os.Stat(dist); err == nil {
			t.Errorf("release %q wrote %s", v, dist)
		}
	}
}

// podBinaryBudget is the most the pod binary may weigh, in bytes: 10 MB (it was 17.5 MB with the cluster's code,
// 10.7 MB without it and without PodBuildFlags).
const podBinaryBudget = 10_000_000
