package kubetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// EnvLine names the environment variable that chooses the Kubernetes line the tests run against: "newest" (the
// default: tools/go.mod) or "oldest" (tools/kube-oldest/go.mod, the oldest line the project supports). make test runs
// the API-server tiers on both; scripts/kube-binaries.sh reads the same variable.
const EnvLine = "KUBE_LINE"

// Line returns the chosen line: "newest" or "oldest".
func Line() string {
	if os.Getenv(EnvLine) == "oldest" {
		return "oldest"
	}
	return "newest"
}

// Lines are the Kubernetes lines the API-server tiers run on, newest first.
var Lines = []string{"newest", "oldest"}

// PinnedVersion returns the Kubernetes version the chosen line pins (v1.37.2, v1.34.12, ...): the API server's.
func PinnedVersion() (string, error) { return PinnedVersionOf(Line()) }

// PinnedVersionOf returns the Kubernetes version line ("newest" or "oldest") pins.
func PinnedVersionOf(line string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	gomod := filepath.Join(root, "tools", "go.mod")
	if line == "oldest" {
		gomod = filepath.Join(root, "tools", "kube-oldest", "go.mod")
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" && strings.HasPrefix(f[1], "v") {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("no k8s.io/kubernetes version in %s", gomod)
}

// Version is what `kubectl version` says of the client and the server.
type Version struct {
	Client, Server string // v1.37.2
	Minor          int    // the server's minor version: what a test branches on
}

// Version asks the API server its version (and kubectl its own).
func (s *APIServer) Version(tb testing.TB) Version {
	tb.Helper()
	var v struct {
		Client struct{ GitVersion string } `json:"clientVersion"`
		Server struct {
			GitVersion string `json:"gitVersion"`
			Minor      string `json:"minor"`
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(s.Kubectl(tb, "version", "-o", "json")), &v); err != nil {
		tb.Fatalf("decoding kubectl version: %v", err)
	}
	minor, err := strconv.Atoi(strings.TrimSuffix(v.Server.Minor, "+"))
	if err != nil {
		tb.Fatalf("the server's minor version %q: %v", v.Server.Minor, err)
	}
	return Version{Client: v.Client.GitVersion, Server: v.Server.GitVersion, Minor: minor}
}
