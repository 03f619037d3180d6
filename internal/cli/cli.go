// Package cli is the command line: one file per subcommand, each turning its flags into a validated
// Config and running it. Signals are handled per subcommand because they mean different things:
// `serve` keeps serving a drain in progress after SIGTERM, `drain` stops on SIGINT.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// Exit codes.
const (
	ExitOK      = 0 // done, or drained
	ExitFailure = 1 // the drain timed out or failed, or the command failed
	ExitUsage   = 2 // bad flags or arguments
	// ExitMisconfigured: drain's admin address refused while Envoy ran (outcome misconfigured), a
	// configuration error set apart from a timeout (1) so that a hook's failure says which it was.
	ExitMisconfigured = 3
)

// Version and Commit are set at build time with -ldflags "-X .../internal/cli.Version=… -X .../internal/cli.Commit=…"
// (the Makefile, internal/image and the Dockerfile stamp both). Version is the commit's tag (v0.1.0) or "dev" for
// every untagged build: a release's inject, webhook and policy default to the image the release workflow publishes
// for it (DefaultImage); a dev build has no default image. Commit tells untagged builds apart (version.go).
var (
	Version = "dev"
	Commit  = ""
)

type Command struct {
	Name, Summary string
	Run           func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

// Pod are the commands of the pod binary (cmd/shutdown-manager-pod): those that run in an Envoy pod, or copy
// the binary into one, and nothing of the cluster's. The full CLI (internal/kubecli) has these and the
// cluster's commands (clusterOnly).
func Pod() []Command {
	return []Command{
		{"serve", "run the sidecar: an HTTP API whose /shutdown drains Envoy (for preStop hooks)", runServe},
		{"drain", "drain Envoy once and exit: 0 drained, 1 timed out or failed, 3 admin address misconfigured (for exec hooks and humans)", runDrain},
		{"run", "run Envoy as a child (the agent): SIGTERM drains it, stops it, exits with its status", runRun},
		{"resume", "make a drained Envoy live again (POST /healthcheck/ok), directly or through a serve API (--via)", runResume},
		{"status", "show Envoy's state and the work in flight per group of listeners and HTTP managers", runStatus},
		Install(false),
		{"version", "print the version, the commit and the Go version (-o json for scripts)", runVersion},
	}
}

// PodCommand is the pod binary's command named name (Pod), for the full CLI's table.
func PodCommand(name string) Command {
	for _, c := range Pod() {
		if c.Name == name {
			return c
		}
	}
	panic("cli: no pod command " + name)
}

// ClusterOnly are the commands of the full CLI that the pod binary lacks: asked for one, it says where it lives.
var ClusterOnly = []string{"inject", "policy", "webhook", "uninject", "completion", "check", "kubectl"}

// PluginName is the file name kubectl finds the plugin by: `kubectl shutdown-manager …` runs
// kubectl-shutdown_manager from the PATH (a dash in a plugin's command is an underscore in its file name).
const PluginName = "kubectl-shutdown_manager"

// Args are the arguments Run takes for a process started with argv: argv[1:], or, when the binary runs as
// the kubectl plugin (its file named kubectl-shutdown_manager, as install --kubectl-plugin writes it),
// "kubectl" and argv[1:], so that `kubectl shutdown-manager status …` is `shutdown-manager kubectl status …`.
func Args(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == PluginName {
		return append([]string{"kubectl"}, argv[1:]...)
	}
	return argv[1:]
}

// Run runs the pod binary's subcommand named by args[0] (Pod) with these standard streams and returns the
// process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return RunCommands(ctx, Pod(), args, stdin, stdout, stderr)
}

// RunCommands runs the subcommand of cmds named by args[0] with these standard streams and returns the
// process exit code.
func RunCommands(ctx context.Context, cmds []Command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 2 && args[0] == "help" { // help COMMAND: the command's own help
		args = []string{args[1], "--help"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	if args[0] == "--version" || args[0] == "-v" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range cmds {
		if c.Name != args[0] {
			continue
		}
		err := c.Run(ctx, args[1:], stdin, stdout, stderr)
		var ue usageError
		var ec manager.ExitStatus
		switch {
		case err == nil:
			return ExitOK
		case errors.As(err, &ec):
			return int(ec)
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "shutdown-manager %s: %v (see shutdown-manager %s -h)\n", c.Name, ue.err, c.Name)
			return ExitUsage
		case errors.Is(err, manager.ErrMisconfigured):
			return ExitMisconfigured
		case errors.Is(err, manager.ErrReported):
			return ExitFailure
		default:
			fmt.Fprintf(stderr, "shutdown-manager %s: %v\n", c.Name, err)
			return ExitFailure
		}
	}
	if slices.Contains(ClusterOnly, args[0]) {
		fmt.Fprintf(stderr, "shutdown-manager: %s is a command of the full CLI (shutdown-manager of a release archive, or the cluster image), not of this pod binary (see shutdown-manager -h)\n", args[0])
		return ExitUsage
	}
	fmt.Fprintf(stderr, "shutdown-manager: unknown command %q (see shutdown-manager -h)\n", args[0])
	return ExitUsage
}

func usage(w io.Writer, cmds []Command) {
	fmt.Fprintln(w, "shutdown-manager: lose no request when a pod running Envoy terminates.")
	fmt.Fprintln(w, "\nUsage: shutdown-manager COMMAND [FLAGS] (run: shutdown-manager run [FLAGS] -- ENVOY_COMMAND…)\n       shutdown-manager --version\n\nCommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun 'shutdown-manager COMMAND -h' for a command's flags, examples and exit codes.")
}

// usageError is a bad flag or argument: exit 2 with one line.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }

func Usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// UsageErr is err as a usage error: exit 2 with one line.
func UsageErr(err error) error { return usageError{err} }

// synopsis is what follows "shutdown-manager COMMAND" in a command's usage line, when not just [FLAGS].
var synopsis = map[string]string{
	"run":            "[FLAGS] -- ENVOY_COMMAND [ARGS…]",
	"install":        "[FLAGS] DIR",
	"completion":     "bash|zsh|fish",
	"kubectl status": "(KIND/NAME | -l SELECTOR) [FLAGS]",
}

// about is a paragraph of a command's help between its usage line and its flags, for the commands whose
// flags do not say what they do.
var about = map[string]string{
	"install": "Copies this binary to DIR/" + installName + " (mode 0555), or with --kubectl-plugin to DIR/" + PluginName + ".",
	"policy": "Writes a MutatingAdmissionPolicy and its two bindings (MutatingAdmissionPolicyBindings; Kubernetes >= 1.36),\n" +
		"as YAML for kubectl apply: one binding for the pods of namespaces labelled shutdown-manager.io/inject=enabled,\n" +
		"one for pods labelled so. The API server then injects pods as inject would with the same flags.",
	"kubectl status": "As a kubectl plugin: kubectl shutdown-manager status. Lists the pods of a Deployment, DaemonSet, StatefulSet,\n" +
		"ReplicaSet or Pod (KIND/NAME or KIND NAME), or those of -l, through the API server, with the drain state of each:\n" +
		"from the manager's Events about the pod (the last drain's: draining, drained, timed-out, envoy-gone, failed,\n" +
		"canceled), else none, no-event (terminating with no drain recorded) or not-managed (not injected); MODE is\n" +
		"the injected mode, from the pod's shutdown-manager.io/status annotation. It needs get on the workload and\n" +
		"list on pods and events in the namespace.",
}

// Parse parses args with fs, printing help (to stdout) only when asked for, and turning every other
// problem into a one-line usage error. Arguments other than flags are an error.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	rest, err := ParseArgs(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return Usagef("unexpected argument %q", strings.Join(rest, " "))
	}
	return nil
}

// ParseArgs parses args with fs as kubectl does, flags and other arguments in any order (after "--", all are
// arguments), and returns the arguments. Every short flag that has a long name (-o, -f, -n, -l) is also given
// it here (--output, ...). A FlagSink as stdout takes fs instead of a parse: how completion and the help
// tests see a command's flags.
func ParseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	addLongNames(fs)
	if sink, ok := stdout.(*FlagSink); ok {
		sink.fs = fs
		return nil, flag.ErrHelp
	}
	var rest []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			printHelp(fs, stdout)
			return nil, err
		}
		if err != nil {
			return nil, usageError{longDashes(err)}
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if len(left) < len(args) && args[len(args)-len(left)-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

// parsedFlag is a flag as the flag package's errors name it, always with one dash ("flag provided but not
// defined: -bogus", "invalid value \"abc\" for flag -drain-timeout: …").
var parsedFlag = regexp.MustCompile(`(defined: |for flag |argument: |value "[^"]*" for )-([A-Za-z0-9][A-Za-z0-9-]+)`)

// longDashes spells a flag named in a parse error as the help and the docs spell it: two dashes for a long
// name (--drain-timeout), one for a letter (-o).
func longDashes(err error) error {
	msg := parsedFlag.ReplaceAllString(err.Error(), "${1}--${2}")
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// FlagSink is a stdout that makes ParseArgs hand over the command's FlagSet and stop (flag.ErrHelp).
type FlagSink struct {
	bytes.Buffer
	fs *flag.FlagSet
}

// FlagSetOf is the FlagSet a command parses its arguments with, got by running it with a FlagSink.
func FlagSetOf(ctx context.Context, c Command) *flag.FlagSet {
	sink := &FlagSink{}
	_ = c.Run(ctx, nil, strings.NewReader(""), sink, io.Discard)
	return sink.fs
}

// longNames are the long names of one-letter flags, as kubectl has them.
var longNames = map[string]string{"o": "output", "f": "filename", "n": "namespace", "l": "selector"}

// addLongNames gives each one-letter flag of fs that has a long name (longNames) that name too: the same
// value, set by either.
func addLongNames(fs *flag.FlagSet) {
	for short, long := range longNames {
		if f := fs.Lookup(short); f != nil && fs.Lookup(long) == nil {
			fs.Var(f.Value, long, f.Usage)
		}
	}
}

// printHelp writes a command's usage line, its flags as the README spells them (a one-letter flag with one
// dash and its long name, -o, --output; every other with two, --drain-timeout; the flag package accepts one
// dash or two), its examples and its exit codes.
func printHelp(fs *flag.FlagSet, w io.Writer) {
	if HelpFlags != nil {
		HelpFlags(fs)
	}
	syn := synopsis[fs.Name()]
	if syn == "" {
		syn = "[FLAGS]"
	}
	fmt.Fprintf(w, "Usage: shutdown-manager %s %s\n\n", fs.Name(), syn)
	a := about[fs.Name()]
	if fs.Name() == "install" && fs.Lookup("kubectl-plugin") == nil { // the pod binary's install: no plugin in it
		a = "Copies this binary to DIR/" + installName + " (mode 0555)."
	}
	if a != "" {
		fmt.Fprintf(w, "%s\n\n", a)
	}
	if hasFlags(fs) {
		fmt.Fprintln(w, "Flags:")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if short := shortName(f.Name); short != "" && fs.Lookup(short) != nil {
			return // shown with its one-letter name
		}
		kind, usage := flag.UnquoteUsage(f)
		line := "  " + Dashed(f.Name)
		if long := longNames[f.Name]; long != "" && fs.Lookup(long) != nil {
			line += ", --" + long
		}
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
	PrintExamples(w, fs.Name())
}

// hasFlags reports whether fs defines a flag.
func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// shortName is the one-letter name whose long name is long, if any.
func shortName(long string) string {
	for s, l := range longNames {
		if l == long {
			return s
		}
	}
	return ""
}

// HelpFlags, when set, is given each command's flag set as its help is printed: the reference of
// docs/reference.md is generated from the flag sets the commands really parse (reference_test.go).
var HelpFlags func(*flag.FlagSet)

// Dashed spells a flag's name as help and the README do: -f, --drain-timeout.
func Dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
