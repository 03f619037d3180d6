package kubecli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/policy"
)

// TestDeployPolicy: deploy/policy/policy.yaml is exactly what `policy` writes with the deploy examples'
// image (-update rewrites it; make deploy does that).
func TestDeployPolicy(t *testing.T) {
	old := cli.Version
	cli.Version = "dev"
	t.Cleanup(func() { cli.Version = old })
	cmd := []string{"policy", "--image=" + deployImage}
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), cmd, nil, &stdout, &stderr); code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	got := "# Generated: below this header, exactly what an untagged build (version dev) writes with:\n" +
		"#   shutdown-manager " + strings.Join(cmd, " ") + "\n" +
		"# Do not edit: make deploy writes it again. Kubernetes >= 1.36; see the README (MutatingAdmissionPolicy).\n" + stdout.String()
	path := filepath.Join("..", "..", "deploy", "policy", "policy.yaml")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (make deploy writes it)", err)
	}
	if got != string(want) {
		t.Errorf("%s is not what policy writes (make deploy writes it again):\n%s", path, got)
	}
}

// TestPolicyUsage: policy takes inject's settings flags and refuses what inject refuses, and arguments.
func TestPolicyUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "--image=" + deployImage, "--mode=daemon"}, `"daemon" is not one of hook, sidecar, agent`},
		{[]string{"policy", "--image="}, "no image given"},
		{[]string{"policy", "extra"}, `unexpected argument "extra"`},
		{[]string{"policy", "-f", "x.yaml"}, "flag provided but not defined: -f"},
	} {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tt.args, nil, &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), tt.want) || stdout.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, nothing on stdout, stderr naming %q", tt.args, code, stdout.String(), stderr.String(), ExitUsage, tt.want)
		}
	}
}

// TestPolicyHelpCountsBindings: the command list and policy's help say how many bindings policy.Generate
// writes, and how each one selects pods.
func TestPolicyHelpCountsBindings(t *testing.T) {
	cfg, err := (&injectFlags{image: deployImage, mode: "hook", binaryFrom: "copy", hook: "exec", sidecarKind: "native"}).config(flag.NewFlagSet("policy", flag.ContinueOnError))
	if err != nil {
		t.Fatal(err)
	}
	_, bindings, err := policy.Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{1: "its binding", 2: "its two bindings", 3: "its three bindings"}[len(bindings)]
	for _, args := range [][]string{{"help"}, {"policy", "-h"}} {
		var stdout, stderr bytes.Buffer
		Run(context.Background(), args, nil, &stdout, &stderr)
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("%v: policy.Generate writes %d bindings, the help does not say %q:\n%s", args, len(bindings), want, stdout.String())
		}
	}
	var help bytes.Buffer
	Run(context.Background(), []string{"policy", "-h"}, nil, &help, io.Discard)
	for _, b := range bindings {
		sel := b.Spec.MatchResources.NamespaceSelector
		what := "namespaces labelled "
		if sel == nil {
			sel, what = b.Spec.MatchResources.ObjectSelector, "pods labelled so"
		}
		for k, v := range sel.MatchLabels {
			if !strings.Contains(strings.ReplaceAll(help.String(), "\n", " "), what) || !strings.Contains(help.String(), k+"="+v) {
				t.Errorf("policy -h does not say binding %s selects %s%s=%s:\n%s", b.Name, what, k, v, help.String())
			}
		}
	}
}
