package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// VersionVar and CommitVar are the variables `-ldflags -X` stamps with the version and the commit (the
// Makefile's LDFLAGS and the Dockerfile name them too).
const (
	VersionVar = "github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Version"
	CommitVar  = "github.com/envoy-shutdown-manager/shutdown-manager/internal/cli.Commit"
)

// MainPackage is the command the pod image holds, relative to the module's root: the pod binary (drain, serve,
// run, …; no Kubernetes types), what Envoy's pods run. ClusterPackage is the cluster image's: the full CLI, which
// the chart's webhook Deployment runs (webhook) and the release archives hold.
const (
	MainPackage    = "./cmd/shutdown-manager-pod"
	ClusterPackage = "./cmd/shutdown-manager"
)

// PodBuildFlags are the pod binary's own build flags (MainPackage; Compile, `make build` and the Dockerfile pass
// them), which keep the copy every Envoy pod holds under 10 MB (issue 26's budget; 10.7 MB without them, amd64):
//   - -tags=nethttpomithttp2: net/http without its HTTP/2 (0.5 MB). The pod side speaks HTTP/1.1 only: Envoy's
//     admin, kubelet's httpGet and `drain --via` to serve's API, and the Events' POST (the API server answers
//     HTTP/1.1 too; two Events a drain need no multiplexing).
//   - no inlining (-l) in the packages outside the standard library (this module's, Prometheus', protobuf's,
//     YAML's: 0.3 MB): the binary waits on Envoy most of its life; the standard library keeps its inlining.
var PodBuildFlags = []string{
	"-tags=nethttpomithttp2",
	"-gcflags=github.com/...=-l", "-gcflags=google.golang.org/...=-l", "-gcflags=go.yaml.in/...=-l",
}

// LDFlags returns the linker flags of `make build` for version and commit: no symbol table or DWARF (-s -w),
// the version and the commit stamped (the binary's `version` prints both).
func LDFlags(version, commit string) string {
	return "-s -w -X " + VersionVar + "=" + version + " -X " + CommitVar + "=" + commit
}

// CompileConfig says what Compile builds.
type CompileConfig struct {
	ModuleDir string   // the module's root (where go.mod is)
	Version   string   // stamped into the binary
	Commit    string   // stamped into the binary: the commit hash (git rev-parse HEAD), or empty
	Arches    []string // GOARCH values, each built for GOOS=linux
	Go        string   // the go command; "go" when empty
	Package   string   // the main package to build; MainPackage when empty
}

// Compile builds c.Package (MainPackage when empty) as `make build` does (CGO_ENABLED=0, -trimpath, LDFlags, and for
// MainPackage PodBuildFlags; plus -buildvcs=false)
// once per arch, and returns the binaries in the order of c.Arches. The output depends only on the sources,
// the flags and the Go toolchain, which is what makes the image reproducible.
func Compile(ctx context.Context, c CompileConfig) ([]Binary, error) {
	goCmd := c.Go
	if goCmd == "" {
		goCmd = "go"
	}
	pkg := c.Package
	if pkg == "" {
		pkg = MainPackage
	}
	tmp, err := os.MkdirTemp("", "shutdown-manager-build-")
	if err != nil {
		return nil, fmt.Errorf("making a build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	var bins []Binary
	for _, arch := range c.Arches {
		out := filepath.Join(tmp, "shutdown-manager-"+arch)
		// -buildvcs=false: the binary must not depend on whether a .git directory is present (a source
		// tarball, the Dockerfile's context); the revision is stamped (Commit) and in the image's labels.
		args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", LDFlags(c.Version, c.Commit)}
		if pkg == MainPackage {
			args = append(args, PodBuildFlags...)
		}
		cmd := exec.CommandContext(ctx, goCmd, append(args, "-o", out, pkg)...)
		cmd.Dir = c.ModuleDir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building for linux/%s (%s): %w: %s", arch, strings.Join(cmd.Args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		data, err := os.ReadFile(out)
		if err != nil {
			return nil, fmt.Errorf("reading the binary for linux/%s: %w", arch, err)
		}
		bins = append(bins, Binary{Arch: arch, Data: data})
	}
	return bins, nil
}
