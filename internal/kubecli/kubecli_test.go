package kubecli

import (
	"slices"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

// TestCommandsArePodsAndCluster: the full CLI has every command of the pod binary (the same ones) and every
// command the pod binary sends to it (cli.ClusterOnly), and no other.
func TestCommandsArePodsAndCluster(t *testing.T) {
	var names []string
	for _, c := range Commands() {
		names = append(names, c.Name)
	}
	var want []string
	for _, c := range cli.Pod() {
		want = append(want, c.Name)
	}
	want = append(want, cli.ClusterOnly...)
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("the full CLI has %q; want the pod binary's and cli.ClusterOnly: %q", names, want)
	}
}
