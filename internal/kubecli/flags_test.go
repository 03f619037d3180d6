package kubecli

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

func TestUsageErrorsAreOneLine(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the one line
	}{
		{[]string{"drain", "--listener-exclude", "("}, "-listener-exclude"},
		{[]string{"drain", "--admin-address", "http://localhost:9901"}, "--admin-address"},
		{[]string{"serve", "--listen", "nowhere"}, "--listen"},
		{[]string{"drain", "--count", "everything"}, "--count"},
		{[]string{"drain", "--drain-timeout", "1s"}, "--drain-timeout"},
		{[]string{"drain", "--check-interval", "0s"}, "--check-interval"},
		{[]string{"drain", "--drain-listeners", "some"}, "--drain-listeners"},
		{[]string{"drain", "--log-level", "loud"}, "--log-level"},
		{[]string{"status", "-o", "wide"}, "-o"},
		{[]string{"inject", "-f", "-", "--output", "table"}, "-o"},
		{[]string{"kubectl", "status"}, "-l SELECTOR"},
		{[]string{"kubectl", "status", "rs/a", "b"}, "unexpected argument"},
		{[]string{"kubectl", "nope"}, "unknown command"},
		{[]string{"completion", "tcsh"}, "bash, zsh, fish"},
		{[]string{"drain", "--drain-delay", "2562047h", "--min-drain-duration", "2562047h", "--drain-timeout", "2562047h"}, "--drain-timeout"},
		{[]string{"drain", "--envoy-gone-after", "0s"}, "--envoy-gone-after"},
		{[]string{"drain", "--quiet-period", "fast"}, "want auto or a duration"},
		{[]string{"drain", "--quiet-period", "-1s"}, "--quiet-period"},
		{[]string{"drain", "--log-output", ""}, "--log-output"},
		{[]string{"status", "--drain-timeout", "5s"}, "drain-timeout"}, // status takes only what changes the count
		{[]string{"drain", "extra"}, "unexpected argument"},
		{[]string{"webhook"}, "--tls-cert-file"},
		{[]string{"webhook", "--tls-cert-file", "c", "--tls-key-file", "k", "--listen", "unix:///x.sock"}, "--listen"},
		{[]string{"webhook", "--tls-cert-file", "c", "--tls-key-file", "k", "--health-listen", "8081"}, "--health-listen"},
		{[]string{"webhook", "--tls-cert-file", "c", "--tls-key-file", "k", "--image", "r.example/sm:v1", "--mode", "daemon"}, "mode"},
		{[]string{"inject", "--image", "x"}, "-f"},
		{[]string{"nope"}, "unknown command"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := Run(context.Background(), tt.args, nil, &stdout, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != ExitUsage || len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"serve", "-h"}, {"drain", "--help"}, {"status", "-h"}, {"version"}, {"--version"}, {"-v"}, {"run", "-h"}, {"inject", "-h"}, {"uninject", "-h"}, {"webhook", "-h"}, {"install", "-h"}, {"policy", "-h"}, {"resume", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := Run(context.Background(), args, nil, &stdout, &stderr); code != ExitOK || stdout.Len() == 0 {
			t.Errorf("%v: exit %d, stdout %d bytes; want 0 and help on stdout", args, code, stdout.Len())
		}
	}
}

// `help COMMAND` is the command's own help, and every command's help lists at least one flag.
func TestHelpCommand(t *testing.T) {
	for _, c := range Commands() {
		var viaHelp, direct, stderr bytes.Buffer
		if code := Run(context.Background(), []string{"help", c.Name}, nil, &viaHelp, &stderr); code != ExitOK {
			t.Errorf("help %s: exit %d (%s)", c.Name, code, stderr.String())
		}
		Run(context.Background(), []string{c.Name, "--help"}, nil, &direct, &stderr)
		if viaHelp.String() != direct.String() {
			t.Errorf("help %s printed\n%s\nwant what %s --help prints:\n%s", c.Name, viaHelp.String(), c.Name, direct.String())
		}
		if hasFlags(cli.FlagSetOf(context.Background(), c)) && !strings.Contains(direct.String(), "  -") {
			t.Errorf("%s --help lists no flag:\n%s", c.Name, direct.String())
		}
	}
	var out bytes.Buffer
	if Run(context.Background(), []string{"version", "--short"}, nil, &out, io.Discard); out.String() != cli.Version+"\n" {
		t.Errorf("version --short printed %q, want %q", out.String(), cli.Version+"\n")
	}
}

// hasFlags reports whether fs defines a flag.
func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// Help is written as the README and the errors write flags (--flag), and says how run takes Envoy's command.
func TestHelpText(t *testing.T) {
	tests := []struct {
		args       []string
		want, dont []string
	}{
		{[]string{"run", "-h"}, []string{"Usage: shutdown-manager run [FLAGS] -- ENVOY_COMMAND", "  --admin-address string", "  --stop-timeout duration"}, []string{"\n  -admin-address"}},
		{[]string{"drain", "-h"}, []string{"  --envoy-gone-after duration", "(default 1s)", "(default \"stderr\")"}, []string{"\n  -drain-timeout"}},
		{[]string{"status", "-h"}, []string{"  --admin-address", "  --listener-exclude"}, []string{"--drain-timeout", "--min-drain-duration", "--check-interval"}},
		{[]string{"--version"}, []string{"shutdown-manager " + cli.Version}, nil},
		// One-letter flags with one dash, as the README writes them, with their kubectl long names on the same
		// line; the others with two, in every command.
		{[]string{"inject", "-h"}, []string{"\n  -f, --filename string", "\n  -o, --output string", "\n  --image string"}, []string{"\n  --f ", "\n  -image", "\n  --filename"}},
		{[]string{"status", "-h"}, []string{"\n  -o, --output string", "output format: table, json, yaml"}, []string{"\n  --o ", "\n  --output"}},
		{[]string{"kubectl", "status", "-h"}, []string{"Usage: shutdown-manager kubectl status (KIND/NAME | -l SELECTOR)", "\n  -n, --namespace string", "\n  -l, --selector string", "table, wide, json, yaml"}, nil},
		{[]string{"install", "-h"}, []string{"Usage: shutdown-manager install [FLAGS] DIR", "Copies this binary", "\n  --log-level string"}, []string{"\n  -log-level"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		Run(context.Background(), tt.args, nil, &stdout, &stderr)
		for _, w := range tt.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, stdout.String())
			}
		}
		for _, d := range tt.dont {
			if strings.Contains(stdout.String(), d) {
				t.Errorf("%v: output has %q:\n%s", tt.args, d, stdout.String())
			}
		}
	}
}
