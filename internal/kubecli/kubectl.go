package kubecli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubeapi"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubectl"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manager"
)

// runKubectl is the kubectl plugin: `kubectl shutdown-manager COMMAND` (or `shutdown-manager kubectl COMMAND`).
func runKubectl(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if _, ok := stdout.(*cli.FlagSink); ok || len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 2 && args[0] == "help" {
			return runKubectl(ctx, []string{args[1], "--help"}, stdin, stdout, stderr)
		}
		fs := flag.NewFlagSet("kubectl", flag.ContinueOnError)
		if err := cli.Parse(fs, nil, stdout); err != nil { // a flagSink: completion's view of the plugin
			return err
		}
		kubectlUsage(stdout)
		if len(args) == 0 {
			return cli.Usagef("give a command: %s", strings.Join(kubectlCommandNames(), ", "))
		}
		return flag.ErrHelp
	}
	for _, c := range kubectlCommands() {
		if c.Name == args[0] {
			return c.Run(ctx, args[1:], stdin, stdout, stderr)
		}
	}
	return cli.Usagef("unknown command %q (one of %s)", args[0], strings.Join(kubectlCommandNames(), ", "))
}

func kubectlCommandNames() []string {
	var names []string
	for _, c := range kubectlCommands() {
		names = append(names, c.Name)
	}
	return names
}

func kubectlUsage(w io.Writer) {
	fmt.Fprintln(w, "The kubectl plugin: kubectl shutdown-manager COMMAND (this binary installed as "+cli.PluginName+" on the PATH:")
	fmt.Fprintln(w, "shutdown-manager install --kubectl-plugin DIR), or shutdown-manager kubectl COMMAND.\n\nCommands:")
	for _, c := range kubectlCommands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.Name, c.Summary)
	}
	fmt.Fprintln(w, "\nRun 'kubectl shutdown-manager COMMAND -h' for a command's flags.")
	cli.PrintExamples(w, "kubectl")
}

// The plugin reads the API server through the Events' access.
var (
	_ kubectl.API    = (*kubeapi.Client)(nil)
	_ kubectl.Execer = (*kubeapi.Client)(nil)
)

// runKubectlStatus lists the pods of a workload (or of a label selector) with the drain state of each, read
// through the API server (kubectl.Status).
func runKubectlStatus(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("kubectl status", flag.ContinueOnError)
	tf := targetFlags(fs)
	liveStatus := fs.Bool("live", false, "also read the /status of each pod's manager that has an HTTP API port (sidecar mode with --hook http, agent mode with --listen) through the API server's pods/proxy: column LIVE, its phase and what is in flight now (needs get on pods/proxy; error: see -o yaml)")
	output := cli.OutputFlag(fs)
	api, q, err := tf.parse(fs, args, stdout)
	if err != nil {
		return err
	}
	q.Live = *liveStatus
	rep, err := kubectl.Status(ctx, api, q)
	if err != nil {
		return err
	}
	switch *output {
	case "table", "wide":
		return kubectl.WriteTable(stdout, rep, *output == "wide", *liveStatus, time.Now())
	}
	return cli.WriteStructured(stdout, *output, rep)
}

// runCheck is the command named name ("check", or the plugin's "kubectl check": the same command) that verifies
// the pods of a workload (or of a label selector), one row per pod and check (kubectl.Check), and fails when a
// check failed.
func runCheck(name string) func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return func(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
		return check(ctx, flag.NewFlagSet(name, flag.ContinueOnError), args, stdout)
	}
}

func check(ctx context.Context, fs *flag.FlagSet, args []string, stdout io.Writer) error {
	tf := targetFlags(fs)
	lb := fs.Duration("deregistration-delay", 0, "also check that the drain holds for a load balancer that may send new connections this long after the pod starts terminating (an AWS NLB: up to its deregistration delay): its drain timeout covers it and the quiet period's silence after (row deregistration; default: the delay inject was given for the pod, recorded in its status annotation, else no such check)")
	liveCheck := fs.Bool("live", false, "also ask each pod's manager whether it reaches Envoy's admin: its /status through the API server's pods/proxy where it has an HTTP API port (needs get on pods/proxy), else `shutdown-manager status` run by the drain's own binary in the drain's own container through pods/exec (hook mode, agent mode, a sidecar on a unix socket; needs create on pods/exec)")
	output := cli.OutputFlag(fs)
	api, q, err := tf.parse(fs, args, stdout)
	if err != nil {
		return err
	}
	q.Live = *liveCheck
	if *lb < 0 {
		return cli.Usagef("--deregistration-delay must not be negative")
	}
	opts := kubectl.CheckOptions{Version: cli.Version, DeregistrationDelay: *lb}
	if q.Live {
		opts.Exec = api
	}
	rep, err := kubectl.Check(ctx, api, q, opts)
	if err != nil {
		return err
	}
	if *output == "table" {
		err = kubectl.WriteCheckTable(stdout, rep)
	} else {
		err = cli.WriteStructured(stdout, *output, rep)
	}
	switch {
	case err != nil:
		return err
	case len(rep.Pods) == 0:
		return fmt.Errorf("no pods to check in %s (selector %s)", rep.Namespace, rep.Selector)
	case rep.Failed() > 0:
		return fmt.Errorf("%w: %d checks failed", manager.ErrReported, rep.Failed())
	}
	return nil
}

// targetFlagValues are the flags of the plugin's commands that name pods and the API server.
type targetFlagValues struct {
	namespace, selector, kubeconfig, kubeContext *string
}

// targetFlags registers -n, -l, --kubeconfig and --context on fs.
func targetFlags(fs *flag.FlagSet) targetFlagValues {
	return targetFlagValues{
		namespace:   fs.String("n", "", "the namespace (default: the kubeconfig context's, in a pod its own, else default)"),
		selector:    fs.String("l", "", "a label selector, as kubectl's (app=envoy,tier!=canary): the pods it matches, or with a workload those of the workload it matches"),
		kubeconfig:  fs.String("kubeconfig", "", "the kubeconfig file (default: the files of $KUBECONFIG merged, else ~/.kube/config, else the pod's service account in a cluster), read as kubectl reads it: exec credential plugins (EKS, GKE, AKS logins), client certificates, tokens, impersonation"),
		kubeContext: fs.String("context", "", "the kubeconfig context to use (default: its current-context)"),
	}
}

// parse parses args with fs, checks -o and the target (KIND/NAME, KIND NAME, or -l), and connects to the API server.
func (tf targetFlagValues) parse(fs *flag.FlagSet, args []string, stdout io.Writer) (*kubeapi.Client, kubectl.Query, error) {
	rest, err := cli.ParseArgs(fs, args, stdout)
	if err != nil {
		return nil, kubectl.Query{}, err
	}
	if err := cli.CheckOutput(fs, fs.Lookup("o").Value.String()); err != nil {
		return nil, kubectl.Query{}, err
	}
	var target string
	switch {
	case len(rest) == 1:
		target = rest[0]
	case len(rest) == 2 && !strings.Contains(rest[0], "/"): // kubectl's TYPE NAME
		target = rest[0] + "/" + rest[1]
	case len(rest) > 1:
		return nil, kubectl.Query{}, cli.Usagef("unexpected argument %q", strings.Join(rest[1:], " "))
	case *tf.selector == "":
		return nil, kubectl.Query{}, cli.Usagef("name a workload (%s/NAME) or give -l SELECTOR", strings.Join(kubectl.Kinds(), "|"))
	}
	if target != "" {
		if _, _, _, err := kubectl.ParseTarget(target); err != nil {
			return nil, kubectl.Query{}, cli.UsageErr(err)
		}
	}
	api, err := kubeapi.New(*tf.kubeconfig, *tf.kubeContext, "shutdown-manager/"+cli.Version+" (kubectl plugin)")
	if err != nil {
		return nil, kubectl.Query{}, err
	}
	return api, kubectl.Query{Namespace: cmp.Or(*tf.namespace, api.Namespace), Target: target, Selector: *tf.selector}, nil
}
