// Package cli is the command line: one file per subcommand, each turning its flags into a validated
// Config and running it. Signals are handled per subcommand because they mean different things:
// `serve` keeps serving a drain in progress after SIGTERM, `drain` stops on SIGINT.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/agent"
)

// Exit codes.
const (
	ExitOK      = 0 // done, or drained
	ExitFailure = 1 // the drain timed out or failed, or the command failed
	ExitUsage   = 2 // bad flags or arguments
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=…".
var Version = "dev"

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the sidecar: an HTTP API whose /shutdown drains Envoy (for preStop hooks)", runServe},
		{"drain", "drain Envoy once and exit: 0 drained, 1 timed out or failed (for exec hooks and humans)", runDrain},
		{"run", "run Envoy as a child (the agent): SIGTERM drains it, stops it, exits with its status", runRun},
		{"resume", "make a drained Envoy live again (POST /healthcheck/ok), directly or through a serve API (--via)", runResume},
		{"inject", "add the manager to the Envoy pods of Kubernetes manifests (-f FILE|-; YAML out)", runInject},
		{"policy", "write a MutatingAdmissionPolicy and its two bindings (opted-in namespaces, opted-in pods) that inject pods in the API server (Kubernetes >= 1.36; YAML out)", runPolicy},
		{"webhook", "serve the mutating admission webhook that injects opted-in pods (HTTPS POST /mutate-pods; TLS files reloaded)", runWebhook},
		{"uninject", "remove what inject added from Kubernetes manifests (-f FILE|-; YAML out)", runUninject},
		{"status", "show Envoy's state and the work in flight per listener", runStatus},
		{"install", "copy this binary to DIR/shutdown-manager, mode 0555 (the image has no shell or cp: hook mode's init container)", runInstall},
		{"version", "print the version", runVersion},
	}
}

// Run runs the subcommand named by args[0] with these standard streams and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" { // help COMMAND: the command's own help
		args = []string{args[1], "--help"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	if args[0] == "--version" || args[0] == "-v" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdin, stdout, stderr)
		var ue usageError
		var ec agent.ExitStatus
		switch {
		case err == nil:
			return ExitOK
		case errors.As(err, &ec):
			return int(ec)
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "shutdown-manager %s: %v (see shutdown-manager %s -h)\n", c.name, ue.err, c.name)
			return ExitUsage
		case errors.Is(err, agent.ErrReported):
			return ExitFailure
		default:
			fmt.Fprintf(stderr, "shutdown-manager %s: %v\n", c.name, err)
			return ExitFailure
		}
	}
	fmt.Fprintf(stderr, "shutdown-manager: unknown command %q (see shutdown-manager -h)\n", args[0])
	return ExitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "shutdown-manager: lose no request when a pod running Envoy terminates.")
	fmt.Fprintln(w, "\nUsage: shutdown-manager COMMAND [FLAGS] (run: shutdown-manager run [FLAGS] -- ENVOY_COMMAND…)\n       shutdown-manager --version\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'shutdown-manager COMMAND -h' for a command's flags.")
}

// usageError is a bad flag or argument: exit 2 with one line.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// synopsis is what follows "shutdown-manager COMMAND" in a command's usage line, when not just [FLAGS].
var synopsis = map[string]string{
	"run":     "[FLAGS] -- ENVOY_COMMAND [ARGS…]",
	"install": "[FLAGS] DIR",
}

// about is a paragraph of a command's help between its usage line and its flags, for the commands whose
// flags do not say what they do.
var about = map[string]string{
	"install": "Copies this binary to DIR/" + installName + " (mode 0555).",
	"policy": "Writes a MutatingAdmissionPolicy and its two bindings (MutatingAdmissionPolicyBindings; Kubernetes >= 1.36),\n" +
		"as YAML for kubectl apply: one binding for the pods of namespaces labelled shutdown-manager.io/inject=enabled,\n" +
		"one for pods labelled so. The API server then injects pods as inject would with the same flags.",
}

// parse parses args with fs, printing help (to stdout) only when asked for, and turning every other
// problem into a one-line usage error.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		printHelp(fs, stdout)
		return err
	}
	if err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	return nil
}

// printHelp writes a command's usage line and its flags as the README spells them: a one-letter flag with
// one dash (-f, -o), every other with two (--drain-timeout). The flag package accepts one dash or two.
func printHelp(fs *flag.FlagSet, w io.Writer) {
	if helpFlags != nil {
		helpFlags(fs)
	}
	syn := synopsis[fs.Name()]
	if syn == "" {
		syn = "[FLAGS]"
	}
	fmt.Fprintf(w, "Usage: shutdown-manager %s %s\n\n", fs.Name(), syn)
	if a := about[fs.Name()]; a != "" {
		fmt.Fprintf(w, "%s\n\n", a)
	}
	fmt.Fprintln(w, "Flags:")
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		line := "  " + dashed(f.Name)
		if kind != "" {
			line += " " + kind
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
			if kind == "string" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
		}
		fmt.Fprintln(w)
	})
}

// helpFlags, when set, is given each command's flag set as its help is printed: the reference of
// docs/reference.md is generated from the flag sets the commands really parse (reference_test.go).
var helpFlags func(*flag.FlagSet)

// dashed spells a flag's name as help and the README do: -f, --drain-timeout.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	short := fs.Bool("short", false, "print the version alone, without the program's name (for scripts)")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *short {
		fmt.Fprintln(stdout, Version)
		return nil
	}
	fmt.Fprintln(stdout, "shutdown-manager", Version)
	return nil
}
