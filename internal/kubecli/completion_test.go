package kubecli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The bash script loads in a real bash and completes commands, the plugin's commands, flags (long names
// included), the values of -o and of flags with a few values, and the plugin's KIND/.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bash is not installed")
		}
		t.Skip("bash is not installed")
	}
	var script bytes.Buffer
	if code := Run(context.Background(), []string{"completion", "bash"}, nil, &script, os.Stderr); code != ExitOK {
		t.Fatalf("completion bash: exit %d", code)
	}
	file := filepath.Join(t.TempDir(), "completion.bash")
	if err := os.WriteFile(file, script.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		line string // what is typed, completed at its end
		want string // COMPREPLY, space separated
	}{
		{"shutdown-manager dr", "drain"},
		{"shutdown-manager ", "serve drain run resume inject policy webhook uninject status install version completion check kubectl"},
		{"shutdown-manager drain --drain-t", "--drain-timeout"},
		{"shutdown-manager drain --count ", "inflight connections requests"},
		{"shutdown-manager drain --count=con", "connections"},
		{"shutdown-manager inject --mode s", "sidecar"},
		{"shutdown-manager inject -f x.yaml --out", "--output"},
		{"shutdown-manager inject -o ", "yaml json"},
		{"shutdown-manager status --output ", "table json yaml"},
		{"shutdown-manager completion ", "bash zsh fish"},
		{"shutdown-manager kubectl s", "status"},
		{"shutdown-manager kubectl status -o w", "wide"},
		{"shutdown-manager kubectl status da", "daemonset/"},
		{"shutdown-manager kubectl status --nam", "--namespace"},
	} {
		words := strings.Split(tt.line, " ")
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + file + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" + strconv.Itoa(len(words)-1) +
			"\n_shutdown_manager\necho \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command(bash, "--norc", "--noprofile", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: bash: %v\n%s", tt.line, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tt.want {
			t.Errorf("%q completes to %q, want %q", tt.line, got, tt.want)
		}
	}
	// The script registers itself for the command.
	out, err := exec.Command(bash, "--norc", "--noprofile", "-c", "source "+file+"\ncomplete -p shutdown-manager").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-F _shutdown_manager shutdown-manager") {
		t.Errorf("complete -p shutdown-manager: %v: %s", err, out)
	}
}

// The zsh and fish scripts name every command and the flags of each.
func TestOtherShells(t *testing.T) {
	for _, shell := range []string{"zsh", "fish"} {
		var out bytes.Buffer
		if code := Run(context.Background(), []string{"completion", shell}, nil, &out, os.Stderr); code != ExitOK {
			t.Fatalf("completion %s: exit %d", shell, code)
		}
		for _, want := range []string{"drain", "kubectl", "drain-timeout", "inflight connections requests", "table wide json yaml"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("completion %s does not name %q", shell, want)
			}
		}
	}
}
