// Package release writes what `make release` adds beside the image and the chart: an SPDX 2.3 SBOM of the
// released binaries, made from the build information Go records in each binary (`go version -m`), and the
// SHA256SUMS file over dist/. Both are pure functions of their inputs (no clock, no map order, no host
// path), so two releases of one commit write the same bytes.
package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Binary is one released executable: its file name in dist/, its content's SHA-256, and the build information
// Go recorded in it (debug/buildinfo.ReadFile).
type Binary struct {
	FileName string
	SHA256   string // lowercase hex
	Info     *debug.BuildInfo
}

// SBOMConfig describes the release the SBOM is for.
type SBOMConfig struct {
	Name      string    // the product: shutdown-manager
	Version   string    // the release: v0.1.0
	Revision  string    // the commit
	Source    string    // the repository URL, the documentNamespace's root and the main module's download location
	License   string    // the project's SPDX license expression: Apache-2.0
	Created   time.Time // the release's fixed time (SOURCE_DATE_EPOCH or the commit's): never the clock
	Binaries  []Binary
	ToolName  string // the creator, "Tool: NAME"
	Copyright string // the project's copyright text; NOASSERTION when empty
}

// The SPDX 2.3 JSON document (spdx-spec v2.3, clause 6 onwards): only the fields this SBOM fills.
type (
	spdxDocument struct {
		SPDXVersion       string             `json:"spdxVersion"`
		DataLicense       string             `json:"dataLicense"`
		SPDXID            string             `json:"SPDXID"`
		Name              string             `json:"name"`
		DocumentNamespace string             `json:"documentNamespace"`
		CreationInfo      spdxCreationInfo   `json:"creationInfo"`
		Packages          []spdxPackage      `json:"packages"`
		Relationships     []spdxRelationship `json:"relationships"`
	}
	spdxCreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	}
	spdxPackage struct {
		Name                  string            `json:"name"`
		SPDXID                string            `json:"SPDXID"`
		VersionInfo           string            `json:"versionInfo,omitempty"`
		PackageFileName       string            `json:"packageFileName,omitempty"`
		Supplier              string            `json:"supplier,omitempty"`
		DownloadLocation      string            `json:"downloadLocation"`
		FilesAnalyzed         bool              `json:"filesAnalyzed"`
		Checksums             []spdxChecksum    `json:"checksums,omitempty"`
		LicenseConcluded      string            `json:"licenseConcluded"`
		LicenseDeclared       string            `json:"licenseDeclared"`
		CopyrightText         string            `json:"copyrightText"`
		Comment               string            `json:"comment,omitempty"`
		ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
		PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	}
	spdxChecksum struct {
		Algorithm     string `json:"algorithm"`
		ChecksumValue string `json:"checksumValue"`
	}
	spdxExternalRef struct {
		ReferenceCategory string `json:"referenceCategory"`
		ReferenceType     string `json:"referenceType"`
		ReferenceLocator  string `json:"referenceLocator"`
	}
	spdxRelationship struct {
		SPDXElementID      string `json:"spdxElementId"`
		RelationshipType   string `json:"relationshipType"`
		RelatedSPDXElement string `json:"relatedSpdxElement"`
	}
)

const noAssertion = "NOASSERTION"

// SBOM returns the SPDX 2.3 JSON document of c: the document DESCRIBES each binary (its file name, SHA-256,
// the main module at c.Version, the build settings Go recorded); each binary DEPENDS_ON the Go modules linked
// into it and the Go standard library of its toolchain. Packages appear in a fixed order (binaries as given,
// then modules sorted by path and version, then the standard library), so the output depends only on c.
// Licences of the dependencies are NOASSERTION: Go's build information does not record them.
func SBOM(c SBOMConfig) ([]byte, error) {
	switch {
	case c.Name == "" || c.Version == "" || c.Revision == "" || c.Source == "":
		return nil, errors.New("writing the SBOM: name, version, revision and source are required")
	case c.Created.IsZero():
		return nil, errors.New("writing the SBOM: no creation time (SOURCE_DATE_EPOCH or the commit's time)")
	case len(c.Binaries) == 0:
		return nil, errors.New("writing the SBOM: no binaries")
	}
	copyright := c.Copyright
	if copyright == "" {
		copyright = noAssertion
	}
	license := c.License
	if license == "" {
		license = noAssertion
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        c.Name + "-" + c.Version,
		// Unique per release and commit, and a function of them only (spdx-spec 6.5 asks for a URI unique to
		// this document; a random UUID would break reproducibility).
		DocumentNamespace: strings.TrimSuffix(c.Source, "/") + "/releases/" + url.PathEscape(c.Version) + "/sbom/" + c.Revision,
		CreationInfo: spdxCreationInfo{
			Created:  c.Created.UTC().Truncate(time.Second).Format(time.RFC3339),
			Creators: []string{"Tool: " + c.ToolName, "Organization: " + c.Name + " project"},
		},
	}
	ids := map[string]bool{}
	uniqueID := func(kind, name string) string {
		base := "SPDXRef-" + kind + "-" + spdxIDUnsafe.ReplaceAllString(name, "-")
		id := base
		for i := 2; ids[id]; i++ {
			id = fmt.Sprintf("%s-%d", base, i)
		}
		ids[id] = true
		return id
	}
	type dep struct{ path, version, replacedBy, sum string }
	depID := map[dep]string{}
	var deps []dep
	stdlibID := map[string]string{}
	var stdlibs []string
	binaryDeps := make([][]string, len(c.Binaries))
	for i, b := range c.Binaries {
		if b.Info == nil {
			return nil, fmt.Errorf("writing the SBOM: %s has no Go build information", b.FileName)
		}
		if len(b.SHA256) != sha256.Size*2 {
			return nil, fmt.Errorf("writing the SBOM: %s: %q is not a SHA-256", b.FileName, b.SHA256)
		}
		goos, goarch := setting(b.Info, "GOOS"), setting(b.Info, "GOARCH")
		id := uniqueID("Package-binary", b.FileName)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name:             c.Name,
			SPDXID:           id,
			VersionInfo:      c.Version,
			PackageFileName:  b.FileName,
			Supplier:         "Organization: " + c.Name + " project",
			DownloadLocation: "git+" + c.Source + "@" + c.Revision,
			Checksums:        []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: b.SHA256}},
			LicenseConcluded: noAssertion,
			LicenseDeclared:  license,
			CopyrightText:    copyright,
			Comment:          "Go package " + b.Info.Path + " of module " + b.Info.Main.Path + ", built with " + b.Info.GoVersion + ": " + settingsText(b.Info),
			ExternalRefs: []spdxExternalRef{{
				ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
				ReferenceLocator: purl(b.Info.Main.Path, c.Version) + "?goarch=" + url.QueryEscape(goarch) + "&goos=" + url.QueryEscape(goos),
			}},
			PrimaryPackagePurpose: "APPLICATION",
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
		for _, m := range b.Info.Deps {
			d := dep{path: m.Path, version: m.Version, sum: m.Sum}
			if m.Replace != nil {
				d.replacedBy, d.sum = m.Replace.Path+"@"+m.Replace.Version, m.Replace.Sum
			}
			if _, ok := depID[d]; !ok {
				depID[d] = ""
				deps = append(deps, d)
			}
			binaryDeps[i] = append(binaryDeps[i], depKey(d.path, d.version, d.replacedBy))
		}
		if _, ok := stdlibID[b.Info.GoVersion]; !ok {
			stdlibID[b.Info.GoVersion] = ""
			stdlibs = append(stdlibs, b.Info.GoVersion)
		}
		binaryDeps[i] = append(binaryDeps[i], "stdlib@"+b.Info.GoVersion)
	}
	slices.SortFunc(deps, func(a, b dep) int {
		return strings.Compare(depKey(a.path, a.version, a.replacedBy), depKey(b.path, b.version, b.replacedBy))
	})
	slices.Sort(stdlibs)
	idByKey := map[string]string{}
	for _, d := range deps {
		id := uniqueID("Package-go-module", d.path+"-"+d.version)
		idByKey[depKey(d.path, d.version, d.replacedBy)] = id
		p := spdxPackage{
			Name:             d.path,
			SPDXID:           id,
			VersionInfo:      d.version,
			DownloadLocation: proxyURL(d.path, d.version),
			LicenseConcluded: noAssertion,
			LicenseDeclared:  noAssertion,
			CopyrightText:    noAssertion,
			ExternalRefs: []spdxExternalRef{{
				ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl(d.path, d.version),
			}},
			PrimaryPackagePurpose: "LIBRARY",
		}
		if d.sum != "" {
			p.Comment = "go.sum hash " + d.sum
		}
		if d.replacedBy != "" {
			p.Comment = strings.TrimSpace("replaced by " + d.replacedBy + "; " + p.Comment)
		}
		doc.Packages = append(doc.Packages, p)
	}
	for _, gv := range stdlibs {
		id := uniqueID("Package-go-stdlib", gv)
		idByKey["stdlib@"+gv] = id
		doc.Packages = append(doc.Packages, spdxPackage{
			Name:             "stdlib",
			SPDXID:           id,
			VersionInfo:      gv,
			DownloadLocation: "https://go.dev/dl/",
			LicenseConcluded: noAssertion,
			LicenseDeclared:  "BSD-3-Clause",
			CopyrightText:    noAssertion,
			Comment:          "the Go standard library of the toolchain that built the binaries",
			ExternalRefs: []spdxExternalRef{{
				ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl("stdlib", gv),
			}},
			PrimaryPackagePurpose: "LIBRARY",
		})
	}
	for i := range c.Binaries {
		for _, k := range binaryDeps[i] {
			doc.Relationships = append(doc.Relationships, spdxRelationship{doc.Packages[i].SPDXID, "DEPENDS_ON", idByKey[k]})
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the SBOM: %w", err)
	}
	return append(out, '\n'), nil
}

// spdxIDUnsafe is what an SPDX identifier may not hold: it is "SPDXRef-" then letters, digits, '.' and '-'.
var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func depKey(path, version, replacedBy string) string { return path + "@" + version + "=>" + replacedBy }

// purl is the package URL of a Go module (purl-spec's golang type): the path's segments escaped one by one.
func purl(path, version string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "pkg:golang/" + strings.Join(segs, "/") + "@" + url.PathEscape(version)
}

// proxyURL is where the Go module proxy serves the module's zip, its path and version case-encoded as the
// proxy protocol requires (an upper-case letter becomes '!' and the lower-case letter).
func proxyURL(path, version string) string {
	return "https://proxy.golang.org/" + caseEncode(path) + "/@v/" + caseEncode(version) + ".zip"
}

func caseEncode(s string) string {
	var b strings.Builder
	for _, r := range s {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// settingsText is the build settings as `go version -m` prints them, one key=value after another.
func settingsText(bi *debug.BuildInfo) string {
	parts := make([]string, 0, len(bi.Settings))
	for _, s := range bi.Settings {
		parts = append(parts, s.Key+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// SHA256Hex is the lowercase hex SHA-256 of data, as Binary.SHA256 and SHA256SUMS hold it.
func SHA256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
