package kubecli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Every command's help (and the plugin's commands') has an Examples and an Exit codes section, and every
// example is a command line of this binary that parses with the flags of the command it names.
func TestHelpSections(t *testing.T) {
	var helps [][]string
	for _, c := range Commands() {
		helps = append(helps, []string{c.Name, "--help"})
		if c.Name == "kubectl" {
			for _, s := range kubectlCommands() {
				helps = append(helps, []string{"kubectl", s.Name, "--help"})
			}
		}
	}
	for _, args := range helps {
		var out, stderr bytes.Buffer
		if code := Run(context.Background(), args, nil, &out, &stderr); code != ExitOK {
			t.Errorf("%v: exit %d: %s", args, code, stderr.String())
		}
		help := out.String()
		ex, codes := strings.Index(help, "\nExamples:\n"), strings.Index(help, "\nExit codes:\n")
		if ex < 0 || codes < ex {
			t.Errorf("%v: want an Examples section, then an Exit codes section:\n%s", args, help)
			continue
		}
		for _, code := range []string{"\n  0 ", "\n  2 "} {
			if !strings.Contains(help[codes:], code) {
				t.Errorf("%v: the exit codes do not say what %s means:\n%s", args, strings.TrimSpace(code), help[codes:])
			}
		}
		n := 0
		for line := range strings.Lines(help[ex:codes]) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") || line == "Examples:" {
				continue
			}
			cmds := CommandsIn(line)
			if len(cmds) == 0 {
				t.Errorf("%v: example %q runs no shutdown-manager command", args, line)
			}
			for _, cmd := range cmds {
				n++
				name := strings.Join(args[:len(args)-1], " ")
				if !strings.HasPrefix(strings.Join(cmd, " ")+" ", name+" ") {
					t.Errorf("%v: example %q is another command's", args, line)
				}
				if err := CheckArgs(cmd); err != nil {
					t.Errorf("%v: example %q: %v", args, line, err)
				}
			}
		}
		if n == 0 {
			t.Errorf("%v: no example", args)
		}
	}
}

// CheckArgs refuses what the command would refuse at parsing.
func TestCheckArgs(t *testing.T) {
	for _, tt := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"drain", "--drain-timeout", "30s"}, true},
		{[]string{"drain", "--drain-timeout", "soon"}, false},
		{[]string{"drain", "--no-such-flag"}, false},
		{[]string{"inject", "--filename", "x.yaml", "--output", "json"}, true},
		{[]string{"run", "--listen", ":8090", "--", "envoy", "--unknown-to-us"}, true},
		{[]string{"kubectl", "status", "deployment/x", "-n", "edge", "-o", "wide"}, true},
		{[]string{"kubectl", "status", "--drain-timeout", "1s"}, false},
		{[]string{"kubectl"}, false},
		{[]string{"nope"}, false},
	} {
		if err := CheckArgs(tt.args); (err == nil) != tt.ok {
			t.Errorf("CheckArgs(%v) = %v, want ok %v", tt.args, err, tt.ok)
		}
	}
}

// Named kubectl-shutdown_manager (the plugin's file), the binary is the plugin.
func TestArgs(t *testing.T) {
	for _, tt := range []struct{ argv, want []string }{
		{[]string{"/usr/local/bin/shutdown-manager", "status"}, []string{"status"}},
		{[]string{"/home/u/.local/bin/kubectl-shutdown_manager", "status", "ds/envoy"}, []string{"kubectl", "status", "ds/envoy"}},
		{[]string{"kubectl-shutdown_manager.exe"}, []string{"kubectl"}},
	} {
		if got := cli.Args(tt.argv); strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("Args(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// TestHelpSocketIsInjects: a unix socket in a help example of the sidecar's API is the one inject writes, so that
// an example typed into an injected pod reaches its sidecar.
func TestHelpSocketIsInjects(t *testing.T) {
	n := 0
	for _, c := range Commands() { // the examples as each command's help prints them
		var help bytes.Buffer
		Run(context.Background(), []string{c.Name, "--help"}, nil, &help, io.Discard)
		_, exs, _ := strings.Cut(help.String(), "\nExamples:\n")
		exs, _, _ = strings.Cut(exs, "\nExit codes:")
		for _, line := range strings.Split(exs, "\n") {
			for _, w := range strings.Fields(line) {
				if strings.HasPrefix(w, "unix://") && strings.HasSuffix(w, "/api.sock") {
					n++
					if w != inject.SocketURL {
						t.Errorf("%s -h example %q names %s; inject writes %s", c.Name, strings.TrimSpace(line), w, inject.SocketURL)
					}
				}
			}
		}
	}
	if n == 0 {
		t.Error("no help example names the sidecar's socket: this test checks nothing")
	}
}
