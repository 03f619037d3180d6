// Package peers gives tests the Envoy workloads that Contour and Envoy Gateway render, read from the peers' own Go
// modules through the Go module proxy (`go mod download`), never copied into this repository: Contour's
// examples/render/*.yaml and Envoy Gateway's golden outputs of its proxy infrastructure
// (internal/infrastructure/kubernetes/proxy/testdata/{deployments,daemonsets}/*.yaml).
package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The peers' modules and the versions read: the only place that names them.
const (
	ContourModule       = "github.com/projectcontour/contour"
	ContourVersion      = "v1.33.8"
	EnvoyGatewayModule  = "github.com/envoyproxy/gateway"
	EnvoyGatewayVersion = "v1.9.1"
)

// EnvoyRefuses tells the renderings on which Envoy would not start (test/integration's
// TestPeerRenderingsEnvoy checks it on the real Envoy): Envoy Gateway's tests of a user's bootstrap render a
// placeholder ("test bootstrap config") as --config-yaml, and its test of extra args renders flags Envoy does
// not have (--key1 val1). What admin such a pod's Envoy uses cannot be read from it: a takeover needs
// --admin-address.
func (w Workload) EnvoyRefuses() bool {
	return bytes.Contains(w.YAML, []byte("test bootstrap config")) || bytes.Contains(w.YAML, []byte("- --key1"))
}

// Every version of the peers' modules that the Go module proxy serves (`go list -m -versions`, pre-releases
// aside), oldest first, the newest being ContourVersion and EnvoyGatewayVersion: EveryVersion reads them all.
var (
	ContourVersions      = []string{"v1.33.7", ContourVersion}
	EnvoyGatewayVersions = []string{"v1.2.4", "v1.2.8", "v1.5.0", "v1.7.0", "v1.8.0", "v1.9.0", EnvoyGatewayVersion}
)

// Workload is one Deployment or DaemonSet document of a peer's manifests whose pod has a container named envoy.
type Workload struct {
	Peer   string // "contour", "envoy-gateway"
	Source string // module@version/path#document (1-based), for messages
	Kind   string // Deployment, DaemonSet
	Name   string // metadata.name
	YAML   []byte // the document, as the peer wrote it
}

// sources: where each peer keeps its rendered Envoy workloads, as globs inside its module.
var sources = []source{
	{"contour", ContourModule, ContourVersion, []string{"examples/render/*.yaml"}},
	{"envoy-gateway", EnvoyGatewayModule, EnvoyGatewayVersion, []string{
		"internal/infrastructure/kubernetes/proxy/testdata/deployments/*.yaml",
		"internal/infrastructure/kubernetes/proxy/testdata/daemonsets/*.yaml",
	}},
}

// Download runs `go mod download -json module@version` and returns the module's directory in the module cache.
func Download(ctx context.Context, module, version string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = os.TempDir() // outside any module: the project's go.mod must not gain the peers
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GO111MODULE=on")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil || info.Error != "" || info.Dir == "" || runErr != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v %s%s", module, version, runErr, info.Error, bytes.TrimSpace(stderr.Bytes()))
	}
	return info.Dir, nil
}

// EveryVersion returns the Envoy workloads of every version in ContourVersions and EnvoyGatewayVersions; it
// fails or skips tb as Workloads does.
func EveryVersion(tb testing.TB) []Workload {
	tb.Helper()
	var out []Workload
	for _, s := range sources {
		versions := map[string][]string{ContourModule: ContourVersions, EnvoyGatewayModule: EnvoyGatewayVersions}[s.module]
		for _, v := range versions {
			s := s
			s.version = v
			ws, err := read(s)
			if err != nil {
				if os.Getenv("CI") == "true" {
					tb.Fatalf("CI=true and the peers' manifests could not be read: %v", err)
				}
				tb.Skipf("the peers' manifests could not be read (no Go module proxy?): %v", err)
			}
			out = append(out, ws...)
		}
	}
	return out
}

// Workloads returns every peer's Envoy workloads. When a module cannot be downloaded it fails tb if the
// environment variable CI is "true" (CI must never pass by not testing), and skips tb otherwise.
func Workloads(tb testing.TB) []Workload {
	tb.Helper()
	return workloadsOf(tb, "")
}

// Of returns the Envoy workloads of one peer ("contour", "envoy-gateway") only, downloading that peer's module
// alone; it fails or skips tb as Workloads does.
func Of(tb testing.TB, peer string) []Workload {
	tb.Helper()
	return workloadsOf(tb, peer)
}

func workloadsOf(tb testing.TB, peer string) []Workload {
	tb.Helper()
	ws, err := workloads(peer)
	if err == nil && len(ws) == 0 {
		err = fmt.Errorf("no peer named %q", peer)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("CI=true and the peers' manifests could not be read: %v", err)
		}
		tb.Skipf("the peers' manifests could not be read (no Go module proxy?): %v", err)
	}
	return ws
}

// source is one version of a peer's module and where in it the Envoy workloads are.
type source struct {
	peer, module, version string
	globs                 []string
}

// read reads the Envoy workloads of one version of one peer's module.
func read(s source) ([]Workload, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out []Workload
	dir, err := Download(ctx, s.module, s.version)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, g := range s.globs {
		m, err := filepath.Glob(filepath.Join(dir, g))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	slices.Sort(files)
	found := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, f)
		for i, doc := range separator.Split(string(data), -1) {
			var h struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Name string `json:"name"`
							} `json:"containers"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &h); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", rel, i+1, err)
			}
			if h.Kind != "Deployment" && h.Kind != "DaemonSet" {
				continue
			}
			if !slices.ContainsFunc(h.Spec.Template.Spec.Containers, func(c struct {
				Name string `json:"name"`
			}) bool {
				return c.Name == "envoy"
			}) {
				continue
			}
			out = append(out, Workload{
				Peer: s.peer, Source: fmt.Sprintf("%s@%s/%s#%d", s.module, s.version, rel, i+1),
				Kind: h.Kind, Name: h.Metadata.Name, YAML: []byte(doc),
			})
			found++
		}
	}
	if found == 0 {
		return nil, fmt.Errorf("%s@%s: no Envoy workload in %v: has the module moved them?", s.module, s.version, s.globs)
	}
	return out, nil
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// workloads reads the workloads of peer, or of every peer when peer is "".
func workloads(peer string) ([]Workload, error) {
	var out []Workload
	for _, s := range sources {
		if peer != "" && s.peer != peer {
			continue
		}
		ws, err := read(s)
		if err != nil {
			return nil, err
		}
		out = append(out, ws...)
	}
	return out, nil
}
