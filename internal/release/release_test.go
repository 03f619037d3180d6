package release

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

var created = time.Date(2026, 11, 25, 14, 40, 47, 0, time.UTC)

func testInfo(goarch string, deps ...*debug.Module) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Path:      "github.com/envoy-shutdown-manager/shutdown-manager/cmd/shutdown-manager",
		Main:      debug.Module{Path: "github.com/envoy-shutdown-manager/shutdown-manager", Version: "(devel)"},
		Deps:      deps,
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"}, {Key: "CGO_ENABLED", Value: "0"},
			{Key: "GOARCH", Value: goarch}, {Key: "GOOS", Value: "linux"},
		},
	}
}

func testConfig() SBOMConfig {
	prom := &debug.Module{Path: "github.com/prometheus/client_golang", Version: "v1.25.0", Sum: "h1:abc="}
	sys := &debug.Module{Path: "golang.org/x/sys", Version: "v0.49.0", Sum: "h1:def="}
	burnt := &debug.Module{Path: "github.com/BurntSushi/toml", Version: "v1.6.0",
		Replace: &debug.Module{Path: "example.com/fork/toml", Version: "v1.6.1", Sum: "h1:ghi="}}
	return SBOMConfig{
		Name: "shutdown-manager", Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567",
		Source: "https://github.com/envoy-shutdown-manager/shutdown-manager", License: "Apache-2.0", Created: created,
		ToolName: "shutdown-manager internal/release",
		Binaries: []Binary{
			// The deps in different orders: the SBOM sorts them.
			{FileName: "shutdown-manager-linux-amd64", SHA256: SHA256Hex([]byte("amd64")), Info: testInfo("amd64", sys, prom, burnt)},
			{FileName: "shutdown-manager-linux-arm64", SHA256: SHA256Hex([]byte("arm64")), Info: testInfo("arm64", prom, sys)},
		},
	}
}

// sbomDoc is what a consumer reads of the document.
type sbomDoc struct {
	SPDXVersion, DataLicense, SPDXID, Name, DocumentNamespace string
	CreationInfo                                              struct {
		Created  string
		Creators []string
	}
	Packages []struct {
		Name, SPDXID, VersionInfo, PackageFileName, DownloadLocation string
		LicenseDeclared, LicenseConcluded, CopyrightText, Comment    string
		PrimaryPackagePurpose                                        string
		FilesAnalyzed                                                *bool
		Checksums                                                    []struct{ Algorithm, ChecksumValue string }
		ExternalRefs                                                 []struct{ ReferenceCategory, ReferenceType, ReferenceLocator string }
	}
	Relationships []struct{ SPDXElementID, RelationshipType, RelatedSPDXElement string }
}

func decodeSBOM(t *testing.T, data []byte) sbomDoc {
	t.Helper()
	var doc sbomDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("the SBOM is not JSON: %v", err)
	}
	return doc
}

// checkSPDX checks what SPDX 2.3 requires of a document and its packages (spdx-spec v2.3 clauses 6 and 7): the
// document fields, identifiers of the allowed form and unique, every package's mandatory fields, and every
// relationship naming elements that exist.
func checkSPDX(t *testing.T, doc sbomDoc) {
	t.Helper()
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" || doc.Name == "" {
		t.Errorf("document header: %q %q %q %q", doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.Name)
	}
	if !strings.HasPrefix(doc.DocumentNamespace, "https://") || strings.Contains(doc.DocumentNamespace, "#") {
		t.Errorf("documentNamespace %q is not a URI without a fragment", doc.DocumentNamespace)
	}
	if _, err := time.Parse("2006-01-02T15:04:05Z", doc.CreationInfo.Created); err != nil {
		t.Errorf("creationInfo.created %q is not YYYY-MM-DDThh:mm:ssZ: %v", doc.CreationInfo.Created, err)
	}
	creator := regexp.MustCompile(`^(Tool|Organization|Person): \S`)
	for _, c := range doc.CreationInfo.Creators {
		if !creator.MatchString(c) {
			t.Errorf("creator %q is not Tool:, Organization: or Person:", c)
		}
	}
	idForm := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	ids := map[string]bool{"SPDXRef-DOCUMENT": true}
	for _, p := range doc.Packages {
		if !idForm.MatchString(p.SPDXID) {
			t.Errorf("package %s: SPDXID %q has characters SPDX does not allow", p.Name, p.SPDXID)
		}
		if ids[p.SPDXID] {
			t.Errorf("SPDXID %q is used twice", p.SPDXID)
		}
		ids[p.SPDXID] = true
		if p.Name == "" || p.DownloadLocation == "" || p.FilesAnalyzed == nil || p.LicenseConcluded == "" ||
			p.LicenseDeclared == "" || p.CopyrightText == "" {
			t.Errorf("package %s lacks a mandatory field: %+v", p.SPDXID, p)
		}
		if p.FilesAnalyzed != nil && *p.FilesAnalyzed {
			t.Errorf("package %s: filesAnalyzed true needs a verification code and files", p.SPDXID)
		}
	}
	for _, r := range doc.Relationships {
		if !ids[r.SPDXElementID] || !ids[r.RelatedSPDXElement] {
			t.Errorf("relationship %s %s %s names an element the document lacks", r.SPDXElementID, r.RelationshipType, r.RelatedSPDXElement)
		}
	}
}

func TestSBOM(t *testing.T) {
	c := testConfig()
	data, err := SBOM(c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := SBOM(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Error("two SBOMs of one release differ")
	}
	doc := decodeSBOM(t, data)
	checkSPDX(t, doc)
	if got, want := doc.CreationInfo.Created, "2026-11-25T14:40:47Z"; got != want {
		t.Errorf("created = %q, want the release's time %q", got, want)
	}
	if got, want := doc.DocumentNamespace, c.Source+"/releases/v0.1.0/sbom/"+c.Revision; got != want {
		t.Errorf("documentNamespace = %q, want %q", got, want)
	}
	var names []string
	for _, p := range doc.Packages {
		names = append(names, p.Name+"@"+p.VersionInfo)
	}
	want := []string{
		"shutdown-manager@v0.1.0", "shutdown-manager@v0.1.0",
		"github.com/BurntSushi/toml@v1.6.0", "github.com/prometheus/client_golang@v1.25.0", "golang.org/x/sys@v0.49.0",
		"stdlib@go1.26.8",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("packages\n%v\nwant (binaries as given, modules sorted once each, the standard library)\n%v", names, want)
	}
	amd := doc.Packages[0]
	if amd.PackageFileName != "shutdown-manager-linux-amd64" || len(amd.Checksums) != 1 ||
		amd.Checksums[0].Algorithm != "SHA256" || amd.Checksums[0].ChecksumValue != SHA256Hex([]byte("amd64")) {
		t.Errorf("amd64 binary: %+v", amd)
	}
	if got, want := amd.ExternalRefs[0].ReferenceLocator, "pkg:golang/github.com/envoy-shutdown-manager/shutdown-manager@v0.1.0?goarch=amd64&goos=linux"; got != want {
		t.Errorf("amd64 purl %q, want %q", got, want)
	}
	if amd.LicenseDeclared != "Apache-2.0" || amd.PrimaryPackagePurpose != "APPLICATION" || !strings.Contains(amd.Comment, "CGO_ENABLED=0") {
		t.Errorf("amd64 binary: %+v", amd)
	}
	toml := doc.Packages[2]
	if toml.DownloadLocation != "https://proxy.golang.org/github.com/!burnt!sushi/toml/@v/v1.6.0.zip" ||
		toml.ExternalRefs[0].ReferenceLocator != "pkg:golang/github.com/BurntSushi/toml@v1.6.0" ||
		toml.Comment != "replaced by example.com/fork/toml@v1.6.1; go.sum hash h1:ghi=" {
		t.Errorf("replaced module: %+v", toml)
	}
	// What each binary depends on: amd64 three modules and the standard library, arm64 two and it.
	deps := map[string][]string{}
	for _, r := range doc.Relationships {
		if r.RelationshipType == "DEPENDS_ON" {
			deps[r.SPDXElementID] = append(deps[r.SPDXElementID], r.RelatedSPDXElement)
		}
	}
	if n, m := len(deps[amd.SPDXID]), len(deps[doc.Packages[1].SPDXID]); n != 4 || m != 3 {
		t.Errorf("amd64 depends on %d, arm64 on %d packages; want 4 and 3: %v", n, m, deps)
	}
	if got := doc.Relationships[0]; got.SPDXElementID != "SPDXRef-DOCUMENT" || got.RelationshipType != "DESCRIBES" || got.RelatedSPDXElement != amd.SPDXID {
		t.Errorf("first relationship %+v, want the document DESCRIBES the amd64 binary", got)
	}
}

// TestSBOMOfThisBinary: the SBOM of a real Go binary's build information (this test's) is valid SPDX.
func TestSBOMOfThisBinary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	c := testConfig()
	c.Binaries = []Binary{{FileName: "release.test", SHA256: SHA256Hex(nil), Info: bi}}
	data, err := SBOM(c)
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeSBOM(t, data)
	checkSPDX(t, doc)
	if len(doc.Packages) != 1+len(bi.Deps)+1 {
		t.Errorf("%d packages for %d deps, want the binary, each dep and the standard library", len(doc.Packages), len(bi.Deps))
	}
}

func TestSBOMRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*SBOMConfig){
		"no version":    func(c *SBOMConfig) { c.Version = "" },
		"no time":       func(c *SBOMConfig) { c.Created = time.Time{} },
		"no binaries":   func(c *SBOMConfig) { c.Binaries = nil },
		"no build info": func(c *SBOMConfig) { c.Binaries[0].Info = nil },
		"bad checksum":  func(c *SBOMConfig) { c.Binaries[0].SHA256 = "abc" },
	} {
		c := testConfig()
		mutate(&c)
		if _, err := SBOM(c); err == nil {
			t.Errorf("%s: SBOM gave no error", name)
		}
	}
}

func TestChecksums(t *testing.T) {
	fsys := fstest.MapFS{
		"b.tgz":                    {Data: []byte("chart")},
		"a-binary":                 {Data: []byte("binary"), Mode: 0o755},
		"image-oci/index.json":     {Data: []byte("{}")},
		"image-oci/blobs/sha256/x": {Data: []byte("blob")},
		SumsFile:                   {Data: []byte("stale")},
	}
	got, err := Checksums(fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := SHA256Hex([]byte("binary")) + "  a-binary\n" +
		SHA256Hex([]byte("chart")) + "  b.tgz\n" +
		SHA256Hex([]byte("blob")) + "  image-oci/blobs/sha256/x\n" +
		SHA256Hex([]byte("{}")) + "  image-oci/index.json\n"
	if string(got) != want {
		t.Errorf("Checksums =\n%s\nwant\n%s", got, want)
	}
	fsys["link"] = &fstest.MapFile{Mode: os.ModeSymlink}
	if _, err := Checksums(fsys); err == nil {
		t.Error("a symlink in dist/ gave no error")
	}
}

// TestChecksumsVerify: sha256sum -c accepts what Checksums writes, and fails when a file changes.
func TestChecksumsVerify(t *testing.T) {
	sha256sum, err := exec.LookPath("sha256sum")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("sha256sum (coreutils) not found")
		}
		t.Skip("sha256sum (coreutils) not found")
	}
	dir := t.TempDir()
	for name, data := range map[string]string{"bin": "binary", "sub/dir/file": "nested", "with space": "x"} {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sums, err := Checksums(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SumsFile), sums, 0o644); err != nil {
		t.Fatal(err)
	}
	check := func() error {
		cmd := exec.Command(sha256sum, "--strict", "-c", SumsFile)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("sha256sum -c: %s", out)
		}
		return err
	}
	if err := check(); err != nil {
		t.Fatalf("sha256sum -c refused the sums: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub/dir/file"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if check() == nil {
		t.Error("sha256sum -c accepted a changed file")
	}
}
