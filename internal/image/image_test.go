package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// testMetadata is a build's metadata with a fixed time, as the Makefile passes it.
var testMetadata = Metadata{
	Version:  "v0.0.0-test",
	Revision: "0123456789abcdef0123456789abcdef01234567",
	Created:  time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC),
}

// fakeBinaries are stand-ins for the pure tests; the tests of the real build use realBinaries.
func fakeBinaries() []Binary {
	return []Binary{{Arch: "amd64", Data: []byte("amd64 binary")}, {Arch: "arm64", Data: []byte("arm64 binary")}}
}

var (
	realOnce     sync.Once
	realBins     []Binary
	realIdx      v1.ImageIndex
	realErr      error
	testArches   = []string{"amd64", "arm64"}
	realTestName string
)

// realIndex compiles the module's command for amd64 and arm64 and builds their index, once per test binary
// (compiling and compressing take minutes under -race on a busy machine), as `make image` does.
func realIndex(t *testing.T) ([]Binary, v1.ImageIndex) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: does not compile the command for two architectures")
	}
	realOnce.Do(func() {
		realTestName = t.Name()
		realBins, realErr = Compile(context.Background(), CompileConfig{
			ModuleDir: moduleRoot(t), Version: testMetadata.Version, Commit: testMetadata.Revision, Arches: testArches})
		if realErr == nil {
			realIdx, realErr = NewIndex(testMetadata, realBins)
		}
		if realErr == nil {
			_, realErr = realIdx.Digest() // compresses the layers once, for every test after
		}
	})
	if realErr != nil {
		t.Fatalf("building the image (first attempted by %s): %v", realTestName, realErr)
	}
	return realBins, realIdx
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

// checkConfig asserts what the README promises about the image's config.
func checkConfig(t *testing.T, cf *v1.ConfigFile, arch string, md Metadata) {
	t.Helper()
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
	}
	if got, want := cf.Config.Entrypoint, []string{BinaryPath}; !slices.Equal(got, want) {
		t.Errorf("Entrypoint = %q, want %q", got, want)
	}
	if len(cf.Config.Cmd) != 0 {
		t.Errorf("Cmd = %q, want none", cf.Config.Cmd)
	}
	if cf.Config.User != "65532" {
		t.Errorf("User = %q, want 65532", cf.Config.User)
	}
	if !cf.Created.Time.Equal(md.Created) {
		t.Errorf("Created = %v, want %v", cf.Created.Time, md.Created)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.version":  md.Version,
		"org.opencontainers.image.source":   "https://github.com/envoy-shutdown-manager/shutdown-manager",
		"org.opencontainers.image.revision": md.Revision,
		"org.opencontainers.image.created":  md.Created.UTC().Format(time.RFC3339),
	}
	if !maps.Equal(cf.Config.Labels, wantLabels) {
		t.Errorf("Labels = %v, want %v", cf.Config.Labels, wantLabels)
	}
}

// checkImageFiles asserts the image holds exactly one file, the binary: mode 0555, owned by 0:0, at the fixed
// time, with the given content.
func checkImageFiles(t *testing.T, img v1.Image, md Metadata, want []byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var content bytes.Buffer
	tr := tar.NewReader(rc)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		names = append(names, h.Name)
		if h.Name != "shutdown-manager" {
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode != 0o555 || h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(md.Created) {
			t.Errorf("header: type %c mode %o uid %d gid %d time %v, want regular 555 0 0 %v",
				h.Typeflag, h.Mode, h.Uid, h.Gid, h.ModTime, md.Created)
		}
		if _, err := io.Copy(&content, tr); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(names, []string{"shutdown-manager"}) {
		t.Errorf("layer files = %q, want only shutdown-manager", names)
	}
	if !bytes.Equal(content.Bytes(), want) {
		t.Errorf("the binary in the layer differs from the one built (%d bytes, want %d)", content.Len(), len(want))
	}
}

// TestBinaryWhereInjectRunsIt: the sidecar inject writes runs our image's entrypoint, and `check --live` execs the
// binary there by inject's name for it.
func TestBinaryWhereInjectRunsIt(t *testing.T) {
	if BinaryPath != inject.ImageBinary {
		t.Errorf("the image's binary is %s, inject.ImageBinary %s", BinaryPath, inject.ImageBinary)
	}
}

func TestNewIndex(t *testing.T) {
	bins := fakeBinaries()
	idx, err := NewIndex(testMetadata, bins)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type = %q, want %q", mt, types.OCIImageIndex)
	}
	var got []string
	for _, d := range im.Manifests {
		got = append(got, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: manifest media type = %q, want %q", d.Platform, d.MediaType, types.OCIManifestSchema1)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(got, want) {
		t.Errorf("platforms = %q, want %q", got, want)
	}
	for _, bin := range bins {
		t.Run(bin.Arch, func(t *testing.T) {
			img, err := ImageFor(idx, bin.Arch)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, cf, bin.Arch, testMetadata)
			if len(cf.History) != 1 || !cf.History[0].Created.Time.Equal(testMetadata.Created) {
				t.Errorf("history = %+v, want one entry at the fixed time", cf.History)
			}
			if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
				t.Errorf("manifest media type = %q, want %q", mt, types.OCIManifestSchema1)
			}
			checkImageFiles(t, img, testMetadata, bin.Data)
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if mt, err := layers[0].MediaType(); err != nil || mt != types.OCILayer {
				t.Errorf("layer media type = %q (%v), want %q", mt, err, types.OCILayer)
			}
		})
	}
	if _, err := ImageFor(idx, "s390x"); err == nil || !strings.Contains(err.Error(), "linux/s390x") {
		t.Errorf("ImageFor(s390x) = %v, want an error naming linux/s390x", err)
	}
}

func TestNewIndexErrors(t *testing.T) {
	tests := []struct {
		name string
		md   Metadata
		bins []Binary
		want string
	}{
		{"no binaries", testMetadata, nil, "no binaries"},
		{"arch twice", testMetadata, []Binary{{"amd64", []byte("a")}, {"amd64", []byte("b")}}, `arch "amd64" given twice`},
		{"empty binary", testMetadata, []Binary{{"amd64", nil}}, `binary for arch "amd64" is empty`},
		{"no version", Metadata{Revision: "r", Created: testMetadata.Created}, fakeBinaries(), "no version"},
		{"no revision", Metadata{Version: "v", Created: testMetadata.Created}, fakeBinaries(), "no revision"},
		{"no time", Metadata{Version: "v", Revision: "r"}, fakeBinaries(), "no creation time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewIndex(tt.md, tt.bins)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewIndex() error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestIndexDigestIsAFunctionOfItsInputs: the same inputs give the same digest; each input changes it.
func TestIndexDigestIsAFunctionOfItsInputs(t *testing.T) {
	digest := func(md Metadata, bins []Binary) v1.Hash {
		t.Helper()
		idx, err := NewIndex(md, bins)
		if err != nil {
			t.Fatal(err)
		}
		h, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	base := digest(testMetadata, fakeBinaries())
	if again := digest(testMetadata, fakeBinaries()); again != base {
		t.Fatalf("same inputs, two digests: %s and %s", base, again)
	}
	later := testMetadata
	later.Created = later.Created.Add(time.Second)
	otherRev := testMetadata
	otherRev.Revision = "fedcba9876543210fedcba9876543210fedcba98"
	otherBin := fakeBinaries()
	otherBin[1].Data = []byte("arm64 binary, rebuilt")
	for name, h := range map[string]v1.Hash{
		"created":  digest(later, fakeBinaries()),
		"revision": digest(otherRev, fakeBinaries()),
		"binary":   digest(testMetadata, otherBin),
	} {
		if h == base {
			t.Errorf("another %s gave the same digest %s", name, h)
		}
	}
}

// TestBuildIsReproducible compiles the real command twice, as two `make image` runs of one commit would, and
// expects the same binaries and the same index digest.
func TestBuildIsReproducible(t *testing.T) {
	firstBins, firstIdx := realIndex(t)
	secondBins, err := Compile(t.Context(), CompileConfig{
		ModuleDir: moduleRoot(t), Version: testMetadata.Version, Commit: testMetadata.Revision, Arches: testArches})
	if err != nil {
		t.Fatal(err)
	}
	for i := range firstBins {
		if !bytes.Equal(firstBins[i].Data, secondBins[i].Data) {
			t.Errorf("linux/%s: two builds gave different binaries", firstBins[i].Arch)
		}
	}
	secondIdx, err := NewIndex(testMetadata, secondBins)
	if err != nil {
		t.Fatal(err)
	}
	first, err := firstIdx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	second, err := secondIdx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Fatalf("two builds of one commit: index digests %s and %s", first, second)
	}
	t.Logf("both builds: index %s", first)
}

// TestImageBinaryRuns runs the host's binary taken out of the image's layer: static, executable, stamped.
func TestImageBinaryRuns(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the image's binaries run on linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	_, idx := realIndex(t)
	img, err := ImageFor(idx, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shutdown-manager")
	rc := uncompressedLayer(t, img)
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o555); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version -o json: %v: %s", path, err, out)
	}
	var got struct{ Version, Commit string }
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s version -o json printed %q: %v", path, out, err)
	}
	if got.Version != testMetadata.Version || got.Commit != testMetadata.Revision {
		t.Errorf("version -o json = %s, want version %q and commit %q stamped", out, testMetadata.Version, testMetadata.Revision)
	}
	// The pod image holds the pod binary: a cluster command is the full CLI's (exit 2).
	if err := exec.Command(path, "webhook", "--help").Run(); exitCode(err) != 2 {
		t.Errorf("the pod image's binary ran webhook --help: %v, want exit 2 (the command of the full CLI)", err)
	}
}

// TestClusterImageBinary: the cluster image (ClusterPackage, built as Compile builds the pod image) holds the full
// CLI, stamped, whose webhook command the chart's Deployment runs.
func TestClusterImageBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: does not compile the full CLI")
	}
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the image's binaries run on linux/amd64 and linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	bins, err := Compile(t.Context(), CompileConfig{ModuleDir: moduleRoot(t), Version: testMetadata.Version,
		Commit: testMetadata.Revision, Arches: []string{runtime.GOARCH}, Package: ClusterPackage})
	if err != nil {
		t.Fatal(err)
	}
	img, err := NewImage(testMetadata, bins[0])
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(uncompressedLayer(t, img))
	if h, err := tr.Next(); err != nil || h.Name != "shutdown-manager" {
		t.Fatalf("the cluster image's layer: %v, %v; want shutdown-manager", h, err)
	}
	data, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "shutdown-manager")
	if err := os.WriteFile(path, data, 0o555); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(path, "webhook", "--help").Output(); err != nil || !bytes.Contains(out, []byte("--tls-cert-file")) {
		t.Errorf("the cluster image's webhook --help: %v:\n%s", err, out)
	}
	out, err := exec.Command(path, "version", "-o", "json").Output()
	var got struct{ Version, Commit string }
	if err != nil || json.Unmarshal(out, &got) != nil || got.Version != testMetadata.Version || got.Commit != testMetadata.Revision {
		t.Errorf("the cluster image's version -o json = %s (%v), want version %q and commit %q", out, err, testMetadata.Version, testMetadata.Revision)
	}
}

// exitCode is the exit status of a command's error: 0 for nil, -1 when it did not exit.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

func uncompressedLayer(t *testing.T, img v1.Image) io.Reader {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func TestWriteArchive(t *testing.T) {
	idx, err := NewIndex(testMetadata, fakeBinaries())
	if err != nil {
		t.Fatal(err)
	}
	img, err := ImageFor(idx, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(path, "shutdown-manager:v0.0.0-test", img); err != nil {
		t.Fatal(err)
	}
	got, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{"shutdown-manager:v0.0.0-test"}) {
		t.Errorf("manifest.json = %+v, want one image tagged shutdown-manager:v0.0.0-test", m)
	}
	wantCfg, _ := img.ConfigName()
	if gotCfg, err := got.ConfigName(); err != nil || gotCfg != wantCfg {
		t.Errorf("config in the archive = %s (%v), want %s", gotCfg, err, wantCfg)
	}
	cf, err := got.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, cf, "arm64", testMetadata)
	checkImageFiles(t, got, testMetadata, []byte("arm64 binary"))

	if err := WriteArchive(filepath.Join(t.TempDir(), "x.tar"), "Not A Name", img); err == nil || !strings.Contains(err.Error(), `"Not A Name"`) {
		t.Errorf("WriteArchive(bad name) = %v, want an error naming it", err)
	}
}

func TestWriteLayout(t *testing.T) {
	idx, err := NewIndex(testMetadata, fakeBinaries())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	// Twice: the second write replaces the first rather than listing the index twice.
	for range 2 {
		if err := WriteLayout(dir, "shutdown-manager:v0.0.0-test", idx); err != nil {
			t.Fatal(err)
		}
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if len(im.Manifests) != 1 || im.Manifests[0].Digest != want ||
		im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "shutdown-manager:v0.0.0-test" {
		t.Fatalf("index.json = %+v, want the index %s named shutdown-manager:v0.0.0-test", im.Manifests, want)
	}
	got, err := top.ImageIndex(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, bin := range fakeBinaries() {
		img, err := ImageFor(got, bin.Arch)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, cf, bin.Arch, testMetadata)
		checkImageFiles(t, img, testMetadata, bin.Data)
	}
	// Readable by anyone: blobs 0644 (go-containerregistry writes them 0600), directories 0755.
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o644)
		if d.IsDir() {
			want = 0o755
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %#o, want %#o", path, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
