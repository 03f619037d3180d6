package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kubectlTimeout bounds one kubectl run of Kubectl, ApplyDryRun and CreateNamespacesOf: a request to a local API
// server takes well under a second; the bound only turns a hang into a failure. They do not use tb.Context(), which
// ends before cleanups run: a cleanup registered after Start runs while the API server still does, and may call them.
const kubectlTimeout = 2 * time.Minute

// Command returns a kubectl command with args against s: its kubeconfig, and a discovery cache of its own (so that a
// later server on the same port never reads this one's). It is killed if ctx ends first. The caller may set Stdin,
// Stdout and Stderr before running it.
func (s *APIServer) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.BinDir, "kubectl"),
		append([]string{"--kubeconfig=" + s.Kubeconfig, "--cache-dir=" + filepath.Join(s.Dir, "kubectl-cache")}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Kubectl runs kubectl with args against s and returns its standard output. It fails tb, with kubectl's output, if
// kubectl fails or runs longer than two minutes.
func (s *APIServer) Kubectl(tb testing.TB, args ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	out, err := s.run(ctx, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// DryRun runs `kubectl apply --dry-run=server` on the files: the API server decodes, defaults, validates (with
// strict field validation: an unknown field is an error) and admits every object without storing it. The
// namespaces the objects name must exist (see CreateNamespacesOf). The error holds kubectl's output, which says
// which object and field were refused.
func (s *APIServer) DryRun(ctx context.Context, files ...string) (string, error) {
	args := []string{"apply", "--dry-run=server", "--validate=strict"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	return s.run(ctx, args...)
}

// ApplyDryRun is DryRun that fails tb when the API server refuses an object; it returns kubectl's output.
func (s *APIServer) ApplyDryRun(tb testing.TB, files ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	out, err := s.DryRun(ctx, files...)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// namespacesTemplate prints the namespace of every object kubectl reads, one per line, whether it prints the objects
// one by one or as a List.
const namespacesTemplate = `go-template={{if .items}}{{range .items}}{{.metadata.namespace}}{{"\n"}}{{end}}` +
	`{{else}}{{.metadata.namespace}}{{"\n"}}{{end}}`

// CreateNamespacesOf creates, for real, every namespace that an object in the files names and that does not exist
// yet (with its default service account, see createNamespace), so that a dry run of those objects can pass; it
// returns the namespaces the files name. A Namespace object in
// the files is not enough on its own: a dry run stores nothing, so the objects after it would not find it.
func (s *APIServer) CreateNamespacesOf(tb testing.TB, files ...string) []string {
	tb.Helper()
	args := []string{"create", "--dry-run=client", "-o", namespacesTemplate}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	var names []string
	for _, line := range strings.Split(s.Kubectl(tb, args...), "\n") {
		if n := strings.TrimSpace(line); n != "" && n != "<no value>" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	ctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
	defer cancel()
	for _, n := range names {
		if err := s.createNamespace(ctx, n); err != nil {
			tb.Fatal(err)
		}
	}
	return names
}

// createNamespace creates the namespace name, if it does not exist, with what kube-controller-manager (which the
// harness does not run) would add: the service account "default", without which the API server refuses any pod
// that names no service account. It applies them from the test's process (Client): a harness step, not a check.
func (s *APIServer) createNamespace(ctx context.Context, name string) error {
	for _, obj := range []map[string]any{
		{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}},
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default", "namespace": name}},
	} {
		if _, err := s.Client().Apply(ctx, "", obj); err != nil {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
	}
	return nil
}

// run runs kubectl; its error holds the command line and kubectl's standard error.
func (s *APIServer) run(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := s.Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}
