// Command build builds one of shutdown-manager's two images (see package image) and writes it under -out, pushes
// it, or both: the pod image (-main pod, the default: the pod binary, what Envoy's pods run and inject names) or
// the cluster image (-main cluster: the full CLI, which the chart's webhook Deployment runs). `make image` and
// `make image-push` run it; it needs Go and, for the defaults, git.
//
//	go run ./internal/image/build -out dist                      # dist/image.tar + dist/image-oci/
//	go run ./internal/image/build -main cluster -out dist        # dist/cluster-image.tar + dist/cluster-image-oci/
//	go run ./internal/image/build -push registry.example/sm:v1   # the multi-arch index, with your credentials
//	go run ./internal/image/build -out dist -release             # + every arch's binary and docker archive
//	go run ./internal/image/build -push REF -layout dist/image-oci # push the image make release wrote
//
// Defaults: -version the tag of the commit (`git describe --tags --exact-match`), else dev, as the Makefile's
// VERSION; the image is then shutdown-manager:dev (the cluster image shutdown-manager-cluster:dev), the name
// deploy/ gives inject with --image; -revision from
// `git rev-parse HEAD`, -created from SOURCE_DATE_EPOCH, else the last commit's time.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "image build:", err)
		os.Exit(1)
	}
}

// config is the validated command line.
type config struct {
	out      string   // directory for the tar and the layout; none when empty
	push     string   // registry reference to push the index to; none when empty
	name     string   // the tag in the tar and the layout (IMAGE, else shutdown-manager:VERSION)
	tarArch  string   // the architecture written to the tar
	arches   []string // the index's architectures
	release  bool     // write every arch's binary and docker archive (make release) instead of one image.tar
	layout   string   // push the index of this OCI layout (make release's) instead of building one
	main     mainKind // which image
	metadata image.Metadata
}

// mainKind is one of the two images: the main package it holds and the names of what it writes.
type mainKind struct {
	pkg        string // the main package (image.MainPackage, image.ClusterPackage)
	name       string // the image's default name, before ":VERSION"
	files      string // the prefix of the files under -out: "" (image.tar, image-oci/) or "cluster-"
	binaryName string // -release: the binary's file, before "linux-ARCH"
}

// mains are the two images by -main.
var mains = map[string]mainKind{
	// The pod binary in a release is shutdown-manager-pod-linux-ARCH; shutdown-manager-linux-ARCH is the full CLI
	// (what users download: inject, the kubectl plugin, …), as before the split.
	"pod":     {pkg: image.MainPackage, name: "shutdown-manager", files: "", binaryName: "shutdown-manager-pod-"},
	"cluster": {pkg: image.ClusterPackage, name: "shutdown-manager-cluster", files: "cluster-", binaryName: "shutdown-manager-"},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(ctx, args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if cfg.layout != "" {
		idx, err := image.ReadLayout(cfg.layout)
		if err != nil {
			return err
		}
		return push(ctx, cfg, idx, stdout, log)
	}
	root, err := moduleRoot(ctx)
	if err != nil {
		return err
	}
	log.Info("compiling", "version", cfg.metadata.Version, "arches", strings.Join(cfg.arches, ","))
	bins, err := image.Compile(ctx, image.CompileConfig{ModuleDir: root, Version: cfg.metadata.Version, Commit: cfg.metadata.Revision, Arches: cfg.arches, Package: cfg.main.pkg})
	if err != nil {
		return err
	}
	idx, err := image.NewIndex(cfg.metadata, bins)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("hashing the index: %w", err)
	}
	log.Info("built index", "digest", digest.String(), "created", cfg.metadata.Created.UTC().Format(time.RFC3339),
		"revision", cfg.metadata.Revision)
	if cfg.out != "" {
		if err := writeDist(cfg, bins, idx, log); err != nil {
			return err
		}
	}
	if cfg.push != "" {
		return push(ctx, cfg, idx, stdout, log)
	}
	return nil
}

// push pushes idx to cfg.push with the user's registry credentials and prints the reference by digest.
func push(ctx context.Context, cfg config, idx v1.ImageIndex, stdout io.Writer, log *slog.Logger) error {
	ref, err := image.Push(ctx, cfg.push, idx, authn.DefaultKeychain)
	if err != nil {
		return err
	}
	log.Info("pushed", "image", cfg.push, "from", cmp.Or(cfg.layout, "a fresh build"))
	fmt.Fprintln(stdout, ref.String())
	return nil
}

func writeDist(cfg config, bins []image.Binary, idx v1.ImageIndex, log *slog.Logger) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return fmt.Errorf("making %s: %w", cfg.out, err)
	}
	archives := map[string]string{cfg.tarArch: filepath.Join(cfg.out, cfg.main.files+"image.tar")}
	if cfg.release {
		// What make release ships per arch: the binary as built (the SBOM reads its build information) and a
		// docker archive (one platform per archive: docker load takes no index).
		archives = map[string]string{}
		for _, bin := range bins {
			path := filepath.Join(cfg.out, cfg.main.binaryName+"linux-"+bin.Arch)
			if err := os.WriteFile(path, bin.Data, 0o755); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
			if err := os.Chmod(path, 0o755); err != nil { // whatever the umask
				return fmt.Errorf("writing %s: %w", path, err)
			}
			log.Info("wrote binary", "path", path)
			archives[bin.Arch] = filepath.Join(cfg.out, cfg.main.files+"image-linux-"+bin.Arch+".tar")
		}
	}
	for _, arch := range cfg.arches {
		tarPath, ok := archives[arch]
		if !ok {
			continue
		}
		img, err := image.ImageFor(idx, arch)
		if err != nil {
			return err
		}
		if err := image.WriteArchive(tarPath, cfg.name, img); err != nil {
			return err
		}
		log.Info("wrote docker archive", "path", tarPath, "name", cfg.name, "arch", arch)
	}
	layoutDir := filepath.Join(cfg.out, cfg.main.files+"image-oci")
	if err := image.WriteLayout(layoutDir, cfg.name, idx); err != nil {
		return err
	}
	log.Info("wrote OCI layout", "path", layoutDir, "name", cfg.name)
	return nil
}

func parseConfig(ctx context.Context, args []string) (config, error) {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	mainName := fs.String("main", "pod", "the image: pod (the pod binary; files image*) or cluster (the full CLI, for the webhook; files cluster-image*)")
	out := fs.String("out", "", "write DIR/image.tar (docker archive, -tar-arch) and DIR/image-oci (OCI layout, every arch)")
	push := fs.String("push", "", "push the multi-arch index to this reference (registry/name:tag)")
	imgName := fs.String("name", "", "the image name in the tar and the layout (default shutdown-manager:VERSION, the cluster image shutdown-manager-cluster:VERSION)")
	tarArch := fs.String("tar-arch", runtime.GOARCH, "architecture of the docker archive")
	arches := fs.String("arches", "amd64,arm64", "architectures of the index (GOARCH values)")
	fromLayout := fs.String("layout", "", "with -push: push the index of this OCI layout (dist/image-oci of make release) instead of building")
	release := fs.Bool("release", false, "with -out: write every arch's binary (DIR/shutdown-manager-pod-linux-ARCH; the cluster image's DIR/shutdown-manager-linux-ARCH) and docker archive (DIR/image-linux-ARCH.tar; DIR/cluster-image-linux-ARCH.tar) instead of DIR/image.tar (make release)")
	version := fs.String("version", "", "version stamped into the binary and the labels (default: the commit's tag, else dev)")
	revision := fs.String("revision", "", "commit for the revision label (default: git rev-parse HEAD)")
	created := fs.Int64("created", -1, "creation time, Unix seconds (default: SOURCE_DATE_EPOCH, else the last commit's time)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	mk, ok := mains[*mainName]
	if !ok {
		return config{}, fmt.Errorf("-main %q: want pod or cluster", *mainName)
	}
	if *fromLayout != "" && (*push == "" || *out != "") {
		return config{}, errors.New("-layout pushes an image already built: give -push REF and no -out")
	}
	if *release && *out == "" {
		return config{}, errors.New("-release writes under -out: give -out DIR")
	}
	if *out == "" && *push == "" {
		return config{}, errors.New("nothing to do: give -out DIR, -push REF or both")
	}
	var err error
	if *version == "" {
		// Not at a tag (or no git): dev, the version of every untagged build.
		if *version, err = gitOutput(ctx, "describe", "--tags", "--exact-match"); err != nil {
			*version = "dev"
		}
	}
	if *revision == "" {
		if *revision, err = gitOutput(ctx, "rev-parse", "HEAD"); err != nil {
			return config{}, err
		}
	}
	if *created < 0 {
		if *created, err = sourceDateEpoch(ctx); err != nil {
			return config{}, err
		}
	}
	if *imgName == "" {
		*imgName = mk.name + ":" + *version
	}
	cfg := config{
		out: *out, push: *push, name: *imgName, tarArch: *tarArch, arches: strings.Split(*arches, ","), release: *release, layout: *fromLayout, main: mk,
		metadata: image.Metadata{Version: *version, Revision: *revision, Created: time.Unix(*created, 0)},
	}
	return cfg, nil
}

// sourceDateEpoch is SOURCE_DATE_EPOCH (reproducible-builds.org's convention), else the last commit's time.
func sourceDateEpoch(ctx context.Context) (int64, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		var err error
		if s, err = gitOutput(ctx, "log", "-1", "--format=%ct"); err != nil {
			return 0, err
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("reading the creation time: %q is not Unix seconds", s)
	}
	return n, nil
}

// moduleRoot is the directory of the main module's go.mod (not git's top level: a source tarball has none).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("running go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the shutdown-manager module: run from its directory")
	}
	return filepath.Dir(gomod), nil
}

func gitOutput(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "git", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("running git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
