package testbed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EnvVarBinary names the environment variable that, when set, selects the one
// Envoy binary [FindBinaries] returns.
const EnvVarBinary = "ENVOY_BIN"

// versionTimeout bounds one `envoy --version` run.
const versionTimeout = 30 * time.Second

// Binary is one Envoy executable under test.
type Binary struct {
	// Path is the path of the executable as found (symlinks are not resolved).
	Path string
	// Version is the release version reported by `envoy --version`, like
	// "1.40.0" (a suffix such as "-dev" is kept).
	Version string
}

// String returns "envoy <Version> (<Path>)".
func (b Binary) String() string { return fmt.Sprintf("envoy %s (%s)", b.Version, b.Path) }

// FindBinaries returns the Envoy binaries to use: the one named by $ENVOY_BIN
// if that is set, else every <moduleRoot>/.tools/bin/envoy-<version> (as
// installed by scripts/install-envoy.sh), sorted newest first. moduleRoot is
// found by walking up from the working directory to the first directory that
// holds a go.mod. The version of each binary is read from `envoy --version`.
// It returns an error if no binary is found or one cannot report its version.
func FindBinaries() ([]Binary, error) {
	if p := os.Getenv(EnvVarBinary); p != "" {
		b, err := binaryAt(p)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvVarBinary, err)
		}
		return []Binary{b}, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, ".tools", "bin")
	paths, err := filepath.Glob(filepath.Join(dir, "envoy-*"))
	if err != nil {
		return nil, err
	}
	var bins []Binary
	for _, p := range paths {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue // dangling link, directory or not executable
		}
		b, err := binaryAt(p)
		if err != nil {
			return nil, err
		}
		bins = append(bins, b)
	}
	if len(bins) == 0 {
		return nil, fmt.Errorf("no Envoy binary: $%s is not set and %s has no envoy-<version> (run scripts/install-envoy.sh)", EnvVarBinary, dir)
	}
	slices.SortStableFunc(bins, func(a, b Binary) int { return compareVersions(b.Version, a.Version) })
	return bins, nil
}

// binaryAt runs `path --version` and returns the Binary.
func binaryAt(path string) (Binary, error) {
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %w (output %q)", path, err, strings.TrimSpace(string(out)))
	}
	v, err := parseVersion(string(out))
	if err != nil {
		return Binary{}, fmt.Errorf("%s --version: %w", path, err)
	}
	return Binary{Path: path, Version: v}, nil
}

// versionRE matches `envoy --version` output such as
// "envoy  version: 9e55809.../1.40.0/Clean/RELEASE/BoringSSL".
var versionRE = regexp.MustCompile(`version: [0-9a-f]+/([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+)?)/`)

// parseVersion extracts the release version from `envoy --version` output.
func parseVersion(out string) (string, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no version in %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

// compareVersions compares dotted numeric versions ("1.40.0" > "1.36.2"); a
// pre-release suffix ("1.41.0-dev") sorts before its release.
func compareVersions(a, b string) int {
	an, as, _ := strings.Cut(a, "-")
	bn, bs, _ := strings.Cut(b, "-")
	ap, bp := strings.Split(an, "."), strings.Split(bn, ".")
	for i := range max(len(ap), len(bp)) {
		if c := cmp.Compare(versionPart(ap, i), versionPart(bp, i)); c != 0 {
			return c
		}
	}
	switch {
	case as == bs:
		return 0
	case as == "":
		return 1
	case bs == "":
		return -1
	}
	return strings.Compare(as, bs)
}

func versionPart(parts []string, i int) int {
	if i >= len(parts) {
		return 0
	}
	n, _ := strconv.Atoi(parts[i])
	return n
}

// moduleRoot walks up from the working directory to the directory holding go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod in the working directory or any parent")
		}
		dir = parent
	}
}
