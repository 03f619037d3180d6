package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestPodRefusesClusterCommands: the pod binary, asked for a command of the full CLI, says in one line where
// that command lives and exits 2; its help lists its own commands and none of the cluster's.
func TestPodRefusesClusterCommands(t *testing.T) {
	for _, name := range ClusterOnly {
		var stdout, stderr bytes.Buffer
		code := Run(t.Context(), []string{name, "-f", "x.yaml"}, strings.NewReader(""), &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != ExitUsage || len(lines) != 1 || !strings.Contains(lines[0], name+" is a command of the full CLI") || stdout.Len() != 0 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying the full CLI has it", name, code, stdout.String(), stderr.String())
		}
	}
	var help bytes.Buffer
	if code := Run(t.Context(), []string{"--help"}, nil, &help, &bytes.Buffer{}); code != ExitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, c := range Pod() {
		if slices.Contains(ClusterOnly, c.Name) {
			t.Errorf("the pod binary has %s, a command of ClusterOnly", c.Name)
		}
		if !strings.Contains(help.String(), "\n  "+c.Name+" ") {
			t.Errorf("--help does not list %s:\n%s", c.Name, help.String())
		}
	}
	for _, name := range ClusterOnly {
		if strings.Contains(help.String(), "\n  "+name+" ") {
			t.Errorf("--help lists %s, which the pod binary lacks:\n%s", name, help.String())
		}
	}
}
