package kubecli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/manifest"
)

// runInject is `inject -f FILE|-`: YAML documents in, the same documents out with every workload injected.
func runInject(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	var f injectFlags
	var m manifestFlags
	m.register(fs, "the manifests: a file of YAML documents (or a List), or - for stdin (required). The pod template's shutdown-manager.io/ annotations override the flags below")
	f.register(fs)
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := m.check(fs); err != nil {
		return err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	in, closeIn, err := openManifests(m.file, stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	// A workload without Envoy passes through (a stream may hold others), but a stream with no workload,
	// or in which no workload has Envoy, is an error: a pipe must not apply unchanged workloads silently.
	// (Workloads that all opted out are not: the user said so.)
	workloads, injected, optedOut := 0, 0, 0
	out, err := manifest.Transform(in, func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
		workloads++
		if !cli.IsFlagSet(fs, "mode") {
			warnModeSwitch(stderr, meta, cfg.Mode)
		}
		err := inject.Inject(meta, spec, cfg)
		switch {
		case err == nil:
			injected++
			warnDeregistration(stderr, meta)
		case errors.Is(err, inject.ErrOptedOut):
			optedOut++
		}
		return err
	}, manifest.Options{Workloads: m.templates.workloads, Notes: stderr})
	if err != nil {
		return err
	}
	switch {
	case workloads == 0:
		return fmt.Errorf("no workload in the manifests (a Pod, or a kind with a pod template: %s; others with --template-path): nothing injected", knownKinds())
	case injected == 0 && optedOut == 0:
		return fmt.Errorf("no workload with an Envoy container: nothing injected")
	}
	if injected > 0 {
		warnUnpullable(stderr, "inject", cfg.Image)
	}
	return writeManifests(stdout, *m.output, out)
}

// warnModeSwitch warns on stderr when a pod inject already injected would change mode only because --mode
// was not given (its default, hook, replacing the sidecar or agent mode the status annotation records), and the
// pod's own mode annotation does not ask for it: re-injecting a file written in sidecar mode to change one
// setting would otherwise turn it into hook mode silently.
func warnModeSwitch(stderr io.Writer, meta *metav1.ObjectMeta, mode inject.Mode) {
	if _, ok := meta.Annotations[inject.AnnotationMode]; ok {
		return
	}
	st, ok, err := inject.ParseStatus(meta)
	if !ok || err != nil || st.Mode == "" || st.Mode == mode {
		return
	}
	pod := ""
	if meta.Name != "" {
		pod = " " + meta.Name
	}
	fmt.Fprintf(stderr, "shutdown-manager inject: warning: pod%s was injected in %s mode and is now injected in %s mode, the default (no --mode given); pass --mode=%s to keep its mode\n",
		pod, st.Mode, mode, st.Mode)
}

// warnDeregistration warns on stderr when the drain timeout of a pod just injected cannot hold it through the
// load balancer's deregistration delay it was given (a --drain-timeout set shorter: inject keeps it).
func warnDeregistration(stderr io.Writer, meta *metav1.ObjectMeta) {
	st, ok, err := inject.ParseStatus(meta)
	if !ok || err != nil {
		return
	}
	if why := inject.DeregistrationShortfall(st); why != "" {
		fmt.Fprintf(stderr, "shutdown-manager inject: warning: %s%s\n", podName(meta), why)
	}
}

// podName is "pod NAME: " for a pod with a name, else "" (a workload's pod template has none).
func podName(meta *metav1.ObjectMeta) string {
	if meta.Name == "" {
		return ""
	}
	return "pod " + meta.Name + ": "
}

// runUninject is `uninject -f FILE|-`: removes exactly what inject added, restoring what it replaced.
func runUninject(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("uninject", flag.ContinueOnError)
	var m manifestFlags
	m.register(fs, "the manifests: a file of YAML documents (or a List), or - for stdin (required)")
	if err := cli.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := m.check(fs); err != nil {
		return err
	}
	in, closeIn, err := openManifests(m.file, stdin)
	if err != nil {
		return err
	}
	defer closeIn()
	out, err := manifest.Transform(in, inject.Uninject, manifest.Options{Workloads: m.templates.workloads, Notes: stderr})
	if err != nil {
		return err
	}
	return writeManifests(stdout, *m.output, out)
}

// manifestFlags are the flags inject and uninject share: the manifests (-f), how to write them (-o) and the
// kinds they do not know (--template-path).
type manifestFlags struct {
	file      string
	output    *string
	templates templatePaths
}

func (m *manifestFlags) register(fs *flag.FlagSet, fileUsage string) {
	fs.StringVar(&m.file, "f", "", fileUsage)
	m.output = cli.OutputFlag(fs)
	m.templates.register(fs)
}

// check validates them once parsed: the manifests are required, the output format one the command has.
func (m *manifestFlags) check(fs *flag.FlagSet) error {
	if m.file == "" {
		return cli.Usagef("give the manifests with -f FILE or -f -")
	}
	return cli.CheckOutput(fs, *m.output)
}

// writeManifests writes inject's YAML stream as it is (-o yaml: untouched documents byte for byte), or as
// JSON (-o json).
func writeManifests(w io.Writer, output string, stream []byte) error {
	if output == "json" {
		j, err := manifestsAsJSON(stream)
		if err != nil {
			return err
		}
		stream = j
	}
	_, err := w.Write(stream)
	return err
}

// openManifests opens the manifests of -f: a file, or stdin for "-". They are read one document at a time
// (manifest.Transform), within its limits on a stream and a document (manifest.MaxStreamBytes, MaxDocumentBytes).
func openManifests(file string, stdin io.Reader) (io.Reader, func(), error) {
	if file == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("reading manifests: %w", err)
	}
	// A file known to be over the limit is refused before a byte of it is decoded.
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > manifest.MaxStreamBytes {
		f.Close()
		return nil, nil, fmt.Errorf("reading manifests: %s is %d MiB, over the limit of %d MiB (%w): inject it in parts",
			file, fi.Size()>>20, manifest.MaxStreamBytes>>20, manifest.ErrTooLarge)
	}
	return f, func() { f.Close() }, nil
}

// templatePaths is the repeatable --template-path flag of inject and uninject: kinds whose pod template
// sits at a given path (manifest.ParseTemplatePath).
type templatePaths struct{ workloads []manifest.Workload }

func (t *templatePaths) register(fs *flag.FlagSet) {
	fs.Func("template-path", "a kind inject does not know (a custom resource) whose pod template sits at a path: KIND=PATH or APIVERSION/KIND=PATH, e.g. example.com/v1/EdgeFleet=spec.pod (repeatable). Known: "+knownKinds(),
		func(v string) error {
			w, err := manifest.ParseTemplatePath(v)
			if err != nil {
				return err
			}
			t.workloads = append(t.workloads, w)
			return nil
		})
}

// knownKinds names the kinds of the manifest table, for help and errors.
func knownKinds() string {
	var names []string
	for _, w := range manifest.Workloads() {
		names = append(names, w.APIVersion+" "+w.Kind)
	}
	return strings.Join(names, ", ")
}
