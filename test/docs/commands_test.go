package docs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/peers"
)

// commandFlags is the flags `shutdown-manager CMD --help` lists, or nil when CMD is not a command.
func commandFlags(t *testing.T, cmd ...string) []string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if kubecli.Run(context.Background(), append(cmd, "--help"), nil, &stdout, &stderr) != 0 {
		return nil
	}
	flags := []string{"-h", "--help"}
	// A flag's line starts with its names, one or several ("  -f, --filename string"), then its type.
	for _, line := range strings.Split(stdout.String(), "\n") {
		if !strings.HasPrefix(line, "  -") {
			continue
		}
		for _, w := range strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == ',' }) {
			if !strings.HasPrefix(w, "-") {
				break
			}
			flags = append(flags, w)
		}
	}
	return flags
}

// commandLines are a ```sh block's commands: continuation lines joined, comments and blank lines left out.
func commandLines(block string) []string {
	var out []string
	joined := strings.ReplaceAll(block, "\\\n", " ")
	for _, l := range strings.Split(joined, "\n") {
		if i := strings.Index(l, " # "); i >= 0 && strings.Count(l[:i], "'")%2 == 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// TestPageCommands: every command of a ```sh block in the README, SECURITY.md and docs/ (the migration pages and
// the sleep section, which other tests run, aside) is one this test can check, and checks out:
// `shutdown-manager CMD` names a command and only flags its help lists; `kubectl … -f PATH` names a file or
// directory of this repository or one an earlier line wrote; `helm install|upgrade` names this chart and only
// values it has; `make TARGET` a target of the Makefile; `go run|test|build ./PATH` a directory of the module.
func TestPageCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	makefile := readRepo(t, "Makefile")
	checked := 0
	for _, page := range pagesButMigration(t) {
		text := readRepo(t, page)
		if page == "docs/migrate.md" { // TestSleepMigration runs that section
			text = strings.Replace(text, section(t, text, "## From a hand-written `sleep` preStop"), "", 1)
		}
		for _, b := range doctable.Blocks(text, "sh") {
			written := map[string]bool{}
			for _, line := range commandLines(b) {
				// a command whose output the shell reads (completion): the command is checked
				if m := regexp.MustCompile(`^source <\((.*)\)$`).FindStringSubmatch(line); m != nil {
					line = m[1]
				}
				if checkShellForm(t, root, page, line) {
					checked++
					continue
				}
				for _, seg := range strings.Split(line, " | ") {
					checked++
					// VAR="…" arguments (make's) are one word
					w := shellWords(regexp.MustCompile(`([A-Z_]+)="[^"]*"`).ReplaceAllString(strings.TrimSpace(seg), "$1=…"))
					if i := slices.Index(w, ">"); i >= 0 && i+1 < len(w) {
						written[w[i+1]] = true
						w = w[:i]
					}
					checkCommand(t, root, page, seg, w, written, makefile)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("%d commands checked: this test checks too little", checked)
	}
}

func checkCommand(t *testing.T, root, page, seg string, w []string, written map[string]bool, makefile string) {
	t.Helper()
	switch {
	case w[0] == "shutdown-manager":
		cmd := w[1:2]
		if w[1] == "kubectl" && len(w) > 2 { // the plugin's commands
			cmd = w[1:3]
		}
		flags := commandFlags(t, cmd...)
		if flags == nil {
			t.Errorf("%s: %q: %s is not a command", page, seg, strings.Join(cmd, " "))
			return
		}
		for _, a := range w[1+len(cmd):] {
			if a == "--" {
				break // Envoy's command follows
			}
			name, _, _ := strings.Cut(a, "=")
			if strings.HasPrefix(name, "-") && name != "-" && !slices.Contains(flags, name) {
				t.Errorf("%s: %q: %s has no flag %s (it has %s)", page, seg, w[1], name, strings.Join(flags, " "))
			}
		}
	case w[0] == "kubectl":
		for i, a := range w {
			if a != "-f" || i+1 >= len(w) || w[i+1] == "-" {
				continue
			}
			f := w[i+1]
			if _, err := os.Stat(filepath.Join(root, f)); err != nil && !written[f] {
				t.Errorf("%s: %q: %s is neither a file of this repository nor written by a line above", page, seg, f)
			}
		}
	case w[0] == "helm" && (w[1] == "install" || w[1] == "upgrade"):
		checkHelm(t, root, page+": "+seg, w)
	case w[0] == "helm" && w[1] == "uninstall":
	case w[0] == "grep" && len(w) == 2:
		// a metric the real API server's test reads
		if !strings.Contains(readRepo(t, "test/kube/webhook_test.go"), w[1]) {
			t.Errorf("%s: %q: test/kube/webhook_test.go does not read %s", page, seg, w[1])
		}
	case w[0] == "make":
		for _, target := range w[1:] {
			if strings.Contains(target, "=") {
				continue
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).MatchString(makefile) {
				t.Errorf("%s: %q: the Makefile has no target %s", page, seg, target)
			}
		}
	case w[0] == "go" && slices.Contains([]string{"run", "test", "build"}, w[1]):
		for _, a := range w[2:] {
			if strings.HasPrefix(a, "./") {
				if fi, err := os.Stat(filepath.Join(root, strings.TrimSuffix(a, "/..."))); err != nil || !fi.IsDir() {
					t.Errorf("%s: %q: %s is not a directory of the module", page, seg, a)
				}
			}
		}
	default:
		t.Errorf("%s: %q: a command this test does not check: check it here or take it off the page", page, seg)
	}
}

// checkShellForm checks the lines that are not simple commands, and reports whether line was one:
// the go-template of the pods without the status annotation (the one test/kube's TestWebhook runs), a `for`
// loop of read-only `kubectl get`s, and a peer's build for the bench (a directory of the peer's module).
func checkShellForm(t *testing.T, root, page, line string) bool {
	t.Helper()
	switch {
	case strings.HasPrefix(line, "T='"):
		src := readRepo(t, "test/kube/webhook_test.go")
		m := regexp.MustCompile("const missingStatusTemplate = `([^`]*)` \\+ inject.AnnotationStatus \\+ `([^`]*)` \\+\\s*`([^`]*)`").FindStringSubmatch(src)
		if m == nil {
			t.Fatal("test/kube/webhook_test.go: no missingStatusTemplate")
		}
		want := "T='" + m[1] + inject.AnnotationStatus + m[2] + m[3] + "'"
		if line != want {
			t.Errorf("%s: %q: not the template test/kube's TestWebhook runs:\n%s", page, line, want)
		}
		return true
	case strings.HasPrefix(line, "for "):
		cmds := regexp.MustCompile(`kubectl [^;)]*`).FindAllString(line, -1)
		if len(cmds) == 0 {
			t.Errorf("%s: %q: a loop this test does not check", page, line)
		}
		for _, c := range cmds {
			if !strings.HasPrefix(c, "kubectl get ") {
				t.Errorf("%s: %q: %q is not a read-only kubectl get", page, line, c)
			}
		}
		return true
	case strings.HasPrefix(line, "(cd ") && strings.Contains(line, "go build"):
		m := regexp.MustCompile(`go build -o (\S+) (\./cmd/[a-z-]+)\)$`).FindStringSubmatch(line)
		if m == nil || !strings.Contains(readRepo(t, "bench/main.go"), `"`+filepath.Base(m[2])+`-bin"`) {
			t.Errorf("%s: %q: not a build of a peer the bench takes with -NAME-bin", page, line)
			return true
		}
		dir, err := peers.Download(context.Background(), peers.EnvoyGatewayModule, peers.EnvoyGatewayVersion)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true and Envoy Gateway's module could not be read: %v", err)
			}
			t.Skipf("Envoy Gateway's module could not be read: %v", err)
		}
		if fi, err := os.Stat(filepath.Join(dir, m[2])); err != nil || !fi.IsDir() {
			t.Errorf("%s: %q: %s is not a directory of %s@%s", page, line, m[2], peers.EnvoyGatewayModule, peers.EnvoyGatewayVersion)
		}
		return true
	}
	return false
}
