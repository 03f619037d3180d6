package kubecli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

// managerCommands are the command lines of the shutdown-manager binary in a Kubernetes object: every command
// (an exec hook's, a container's) whose first word is a path ending in /shutdown-manager, with its container's
// args, and the args of a container that runs the manager's image by its entrypoint (no command). Each is
// returned without its first word, as Run takes it.
func managerCommands(v any) [][]string {
	var out [][]string
	strs := func(v any) []string {
		l, _ := v.([]any)
		var s []string
		for _, e := range l {
			str, _ := e.(string)
			s = append(s, str)
		}
		return s
	}
	switch v := v.(type) {
	case map[string]any:
		cmd, args := strs(v["command"]), strs(v["args"])
		image, _ := v["image"].(string)
		switch {
		case len(cmd) > 0 && strings.HasSuffix(cmd[0], "/shutdown-manager"):
			out = append(out, append(cmd[1:], args...))
		case len(cmd) == 0 && len(args) > 0 && strings.Contains(image, "shutdown-manager"):
			out = append(out, args)
		}
		for k, e := range v {
			if k != "command" && k != "args" {
				out = append(out, managerCommands(e)...)
			}
		}
	case []any:
		for _, e := range v {
			out = append(out, managerCommands(e)...)
		}
	}
	return out
}

// TestInjectedCommandsRunOnPodBinary: every command inject writes into pods — the golden files of
// internal/manifest and the deploy/ examples, the same since the release before the pod binary existed — is one
// the pod binary (cli.Pod) takes: its command and every flag parse. The hooks and containers of pods injected
// by a previous version keep working when the pod image holds the pod binary.
func TestInjectedCommandsRunOnPodBinary(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "manifest", "testdata", "*.out.yaml"))
	deploy, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "*", "*.yaml"))
	files = append(files, deploy...)
	n := 0
	seen := map[string]bool{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range bytes.Split(data, []byte("\n---")) {
			var v any
			if err := yaml.Unmarshal(doc, &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for _, args := range managerCommands(v) {
				n++
				seen[args[0]] = true
				if err := checkArgs(cli.Pod(), args); err != nil {
					t.Errorf("%s: shutdown-manager %s: the pod binary refuses it: %v", filepath.Base(f), strings.Join(args, " "), err)
				}
			}
		}
	}
	for _, want := range []string{"drain", "serve", "run", "install"} {
		if !seen[want] {
			t.Errorf("no injected %s command found in %d files: the test does not see what inject writes", want, len(files))
		}
	}
	t.Logf("%d injected commands in %d files parse on the pod binary", n, len(files))
}
