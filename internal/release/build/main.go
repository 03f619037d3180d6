// Command build finishes a release directory that `make release` has filled with the binaries, the image and
// the chart package: it writes the SPDX SBOM of the binaries (DIST/shutdown-manager-VERSION.spdx.json, from the
// build information Go recorded in each: `go version -m`), then DIST/SHA256SUMS over every file in DIST.
//
//	go run ./internal/release/build -dist dist -version v0.1.0 -revision $(git rev-parse HEAD) -created $(git log -1 --format=%ct)
package main

import (
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/release"
)

// BinaryGlob matches the released binaries in dist/: the full CLI's shutdown-manager-linux-{amd64,arm64} and the
// pod binary's shutdown-manager-pod-linux-{amd64,arm64}.
const BinaryGlob = "shutdown-manager-*linux-*"

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "release build:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	dist := fs.String("dist", "dist", "the release directory, holding the binaries "+BinaryGlob)
	version := fs.String("version", "", "the release's version (v0.1.0)")
	revision := fs.String("revision", "", "the commit (git rev-parse HEAD)")
	created := fs.Int64("created", -1, "the release's time, Unix seconds (SOURCE_DATE_EPOCH or the commit's time)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	if *version == "" || *revision == "" || *created < 0 {
		return errors.New("-version, -revision and -created are required")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	bins, err := readBinaries(*dist)
	if err != nil {
		return err
	}
	sbom, err := release.SBOM(release.SBOMConfig{
		Name: "shutdown-manager", Version: *version, Revision: *revision, Source: image.Source, License: "Apache-2.0",
		Created: time.Unix(*created, 0), Binaries: bins, ToolName: "shutdown-manager internal/release",
	})
	if err != nil {
		return err
	}
	sbomPath := filepath.Join(*dist, "shutdown-manager-"+*version+".spdx.json")
	if err := os.WriteFile(sbomPath, sbom, 0o644); err != nil {
		return fmt.Errorf("writing the SBOM: %w", err)
	}
	log.Info("wrote SBOM", "path", sbomPath, "binaries", len(bins))
	sums, err := release.Checksums(os.DirFS(*dist))
	if err != nil {
		return err
	}
	sumsPath := filepath.Join(*dist, release.SumsFile)
	if err := os.WriteFile(sumsPath, sums, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", sumsPath, err)
	}
	log.Info("wrote checksums", "path", sumsPath, "files", strings.Count(string(sums), "\n"))
	return nil
}

// readBinaries reads each DIST/shutdown-manager-*linux-* file's Go build information and hashes it, in name order.
func readBinaries(dist string) ([]release.Binary, error) {
	paths, err := filepath.Glob(filepath.Join(dist, BinaryGlob))
	if err != nil {
		return nil, fmt.Errorf("listing the binaries: %w", err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no binaries %s in %s", BinaryGlob, dist)
	}
	slices.Sort(paths)
	var bins []release.Binary
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		info, err := buildinfo.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading the Go build information of %s: %w", p, err)
		}
		bins = append(bins, release.Binary{FileName: filepath.Base(p), SHA256: release.SHA256Hex(data), Info: info})
	}
	return bins, nil
}
