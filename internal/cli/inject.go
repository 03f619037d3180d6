package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// injectFlags are `inject`'s flags; each maps onto inject.Config, and is passed on only when set.
type injectFlags struct {
	file            string
	image           string
	pullPolicy      string
	mode            string
	binaryFrom      string
	hook            string
	sidecarKind     string
	envoyContainer  string
	envoyCommand    string
	admin           string
	port            int
	metricsPort     int
	replaceHooks    bool
	delay           time.Duration
	minDuration     time.Duration
	timeout         time.Duration
	minOpen         int64
	count           string
	listenerExclude stringList
}

func (f *injectFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "the manifests: a file of YAML documents (or a List), or - for stdin (required)")
	fs.StringVar(&f.image, "image", "shutdown-manager:"+Version, "the shutdown-manager image")
	fs.StringVar(&f.pullPolicy, "image-pull-policy", "", "pull policy of the injected containers and image volume: Always, IfNotPresent, Never (default: Kubernetes' default)")
	fs.StringVar(&f.mode, "mode", string(inject.DefaultMode), "hook (Envoy's preStop runs drain; nothing runs until then), sidecar (serve beside Envoy), agent (run wraps Envoy's command)")
	fs.StringVar(&f.binaryFrom, "binary-from", string(inject.DefaultBinaryFrom), "how Envoy's container gets the binary: copy (an init container copies it into an emptyDir) or image-volume (Kubernetes >= 1.35, containerd >= 2)")
	fs.StringVar(&f.hook, "hook", string(inject.DefaultHook), "sidecar mode: exec (drain --via a unix socket; no port) or http (httpGet /shutdown on --port)")
	fs.StringVar(&f.sidecarKind, "sidecar-kind", string(inject.DefaultSidecarKind), "sidecar mode: native (restartPolicy Always init container, Kubernetes >= 1.29) or plain (a regular container)")
	fs.StringVar(&f.envoyContainer, "envoy-container", "", "Envoy's container (default: the one named envoy, else the one whose image is Envoy's)")
	fs.StringVar(&f.envoyCommand, "envoy-command", strings.Join(inject.DefaultEnvoyCommand, " "), "agent mode: Envoy's command when its container sets none (words separated by spaces)")
	fs.StringVar(&f.admin, "admin-address", "", "Envoy's admin API (default: found at drain time from Envoy's command line and bootstrap; the sidecar uses http://127.0.0.1:9901)")
	fs.IntVar(&f.port, "port", inject.DefaultPort, "sidecar mode with --hook http: the API's port")
	fs.IntVar(&f.metricsPort, "metrics-port", inject.DefaultMetricsPort, "sidecar mode with --hook http: the metrics port")
	fs.BoolVar(&f.replaceHooks, "replace-hooks", false, "replace a preStop hook Envoy's container already has (uninject restores it)")
	fs.DurationVar(&f.delay, "drain-delay", inject.DefaultDrainDelay, "passed to the drain")
	fs.DurationVar(&f.minDuration, "min-drain-duration", inject.DefaultMinDrainDuration, "passed to the drain")
	fs.DurationVar(&f.timeout, "drain-timeout", 0, "the drain timeout; the grace period is raised to fit it (default: derived from terminationGracePeriodSeconds)")
	fs.Int64Var(&f.minOpen, "min-open-connections", 0, "passed to the drain")
	fs.StringVar(&f.count, "count", "", "passed to the drain: inflight, connections, requests")
	fs.Var(&f.listenerExclude, "listener-exclude", "passed to the drain (repeatable)")
}

// config turns the flags that were set (fs says which) into an inject.Config.
func (f *injectFlags) config(fs *flag.FlagSet) (inject.Config, error) {
	if f.file == "" {
		return inject.Config{}, usagef("give the manifests with -f FILE or -f -")
	}
	if f.port < 0 || f.port > 65535 || f.metricsPort < 0 || f.metricsPort > 65535 {
		return inject.Config{}, usagef("--port and --metrics-port must be ports")
	}
	cfg := inject.Config{
		Image:           f.image,
		ImagePullPolicy: corev1.PullPolicy(f.pullPolicy),
		Version:         Version,
		Mode:            inject.Mode(f.mode),
		BinaryFrom:      inject.BinaryFrom(f.binaryFrom),
		Hook:            inject.Hook(f.hook),
		SidecarKind:     inject.SidecarKind(f.sidecarKind),
		EnvoyContainer:  f.envoyContainer,
		EnvoyCommand:    strings.Fields(f.envoyCommand),
		AdminAddress:    f.admin,
		Port:            int32(f.port),
		MetricsPort:     int32(f.metricsPort),
		ReplaceHooks:    f.replaceHooks,
		Drain: inject.Drain{
			Count:           f.count,
			ListenerExclude: f.listenerExclude,
		},
	}
	if isFlagSet(fs, "drain-delay") {
		cfg.Drain.Delay = &f.delay
	}
	if isFlagSet(fs, "min-drain-duration") {
		cfg.Drain.MinDuration = &f.minDuration
	}
	if isFlagSet(fs, "drain-timeout") {
		cfg.Drain.Timeout = &f.timeout
	}
	if isFlagSet(fs, "min-open-connections") {
		cfg.Drain.MinOpenConnections = &f.minOpen
	}
	if err := cfg.Validate(); err != nil {
		return inject.Config{}, usageError{err}
	}
	return cfg, nil
}

// runInject is `inject -f FILE|-`: YAML documents in, the same documents out with every workload injected.
func runInject(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inject", flag.ContinueOnError)
	var f injectFlags
	f.register(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	in, err := readManifests(f.file)
	if err != nil {
		return err
	}
	out, err := transformManifests(in, func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
		return inject.Inject(meta, spec, cfg)
	}, stderr)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// runUninject is `uninject -f FILE|-`: removes exactly what inject added, restoring what it replaced.
func runUninject(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("uninject", flag.ContinueOnError)
	file := fs.String("f", "", "the manifests: a file of YAML documents (or a List), or - for stdin (required)")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *file == "" {
		return usagef("give the manifests with -f FILE or -f -")
	}
	in, err := readManifests(*file)
	if err != nil {
		return err
	}
	out, err := transformManifests(in, inject.Uninject, stderr)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func readManifests(file string) ([]byte, error) {
	if file == "-" {
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			return nil, fmt.Errorf("reading stdin: %w", err)
		}
		return data, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	return data, nil
}

// podFunc is the mutation applied to every pod (template) found.
type podFunc func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error

// transformManifests applies fn to the pod of every workload in a stream of YAML documents, and returns the
// stream with those documents re-encoded. Every other document, and every workload fn leaves unchanged,
// is written back byte for byte, with its separator line, in order. Errors name the document (1-based
// index, kind, name). Notes (a workload opted out, annotations on the wrong object) go to notes.
func transformManifests(data []byte, fn podFunc, notes io.Writer) ([]byte, error) {
	var out bytes.Buffer
	for i, doc := range splitDocuments(data) {
		body, err := transformDocument(doc.body, fn, notes, fmt.Sprintf("document %d", i+1))
		if err != nil {
			return nil, err
		}
		out.Write(doc.separator)
		out.Write(body)
	}
	return out.Bytes(), nil
}

// document is one YAML document: the separator line before it ("---…\n", empty for the first document
// when the stream starts without one) and its text.
type document struct{ separator, body []byte }

var separatorLine = regexp.MustCompile(`^---(\s.*)?$`)

// splitDocuments splits a YAML stream at its "---" lines, keeping every byte: joining the separators and
// bodies gives the input back.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		if separatorLine.Match(bytes.TrimRight(line, "\r\n")) {
			if cur.separator != nil || len(cur.body) > 0 {
				docs = append(docs, cur)
			}
			cur = document{separator: line}
			continue
		}
		cur.body = append(cur.body, line...)
	}
	if cur.separator != nil || len(cur.body) > 0 || len(docs) == 0 {
		docs = append(docs, cur)
	}
	return docs
}

// header is what every object says about itself.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func (h header) describe() string {
	name := h.Metadata.Name
	if h.Metadata.Namespace != "" {
		name = h.Metadata.Namespace + "/" + name
	}
	if name == "" {
		return h.Kind
	}
	return h.Kind + " " + name
}

// transformDocument returns body with fn applied to its workload (or to each workload of a List), or body
// itself when there is nothing to change. where names the document in errors and notes.
func transformDocument(body []byte, fn podFunc, notes io.Writer, where string) ([]byte, error) {
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", where, err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || js[0] != '{' {
		return body, nil // empty, a comment, or not an object: not ours to judge
	}
	var h header
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	where = fmt.Sprintf("%s (%s)", where, h.describe())
	if strings.HasSuffix(h.Kind, "List") {
		return transformList(body, js, fn, notes, where)
	}
	out, changed, err := transformObject(js, h, fn, notes, where)
	if err != nil || !changed {
		return body, err
	}
	return yaml.JSONToYAML(out)
}

// transformList applies fn to every workload among a List's items.
func transformList(body, js []byte, fn podFunc, notes io.Writer, where string) ([]byte, error) {
	var list map[string]json.RawMessage
	if err := json.Unmarshal(js, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var items []json.RawMessage
	if raw, ok := list["items"]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("%s: items: %w", where, err)
		}
	}
	changed := false
	for i, item := range items {
		var h header
		if err := json.Unmarshal(item, &h); err != nil {
			return nil, fmt.Errorf("%s item %d: %w", where, i+1, err)
		}
		out, c, err := transformObject(item, h, fn, notes, fmt.Sprintf("%s item %d (%s)", where, i+1, h.describe()))
		if err != nil {
			return nil, err
		}
		if c {
			items[i], changed = out, true
		}
	}
	if !changed {
		return body, nil
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	list["items"] = raw
	out, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	return yaml.JSONToYAML(out)
}

// transformObject decodes one object (JSON) into its typed workload, applies fn to its pod, and returns
// its JSON when fn changed something. Decoding is strict: a field the Kubernetes API types do not know is
// an error rather than silently dropped.
func transformObject(js []byte, h header, fn podFunc, notes io.Writer, where string) ([]byte, bool, error) {
	w, ok := inject.LookupWorkload(h.APIVersion, h.Kind)
	if !ok {
		if inject.IsWorkloadKind(h.Kind) {
			return nil, false, fmt.Errorf("%s: apiVersion %q is not supported for %s", where, h.APIVersion, h.Kind)
		}
		return js, false, nil
	}
	obj := w.New()
	if err := yaml.UnmarshalStrict(js, obj); err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	before := w.New()
	if err := json.Unmarshal(js, before); err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	if outer, ok := obj.(metav1.Object); ok && h.Kind != "Pod" {
		for k := range outer.GetAnnotations() {
			if strings.HasPrefix(k, inject.Prefix) {
				fmt.Fprintf(notes, "%s: annotation %s is on the %s itself and has no effect: put it on the pod template (spec.template.metadata.annotations)\n", where, k, h.Kind)
			}
		}
	}
	meta, spec := w.Pod(obj)
	err := fn(meta, spec)
	if errors.Is(err, inject.ErrOptedOut) {
		fmt.Fprintf(notes, "%s: %v; left unchanged\n", where, err)
		return js, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	if equality.Semantic.DeepEqual(before, obj) {
		return js, false, nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	out, err = pruneEmpty(out)
	if err != nil {
		return nil, false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	return out, true, nil
}

// emptyNoise are the fields that Go's encoding of the API types writes as {} or null when a manifest
// leaves them out (struct values and a zero time, which omitempty does not drop). Empty or absent, they
// mean the same; dropping them keeps the output close to the input.
var emptyNoise = map[string]bool{"creationTimestamp": true, "resources": true, "strategy": true, "updateStrategy": true, "status": true, "metadata": true}

// pruneEmpty removes emptyNoise fields whose value is null or {} from an encoded object.
func pruneEmpty(js []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // integers stay exact
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	prune(v)
	return json.Marshal(v)
}

func prune(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			prune(child)
			if !emptyNoise[k] {
				continue
			}
			if m, ok := child.(map[string]any); child == nil || ok && len(m) == 0 {
				delete(v, k)
			}
		}
	case []any:
		for _, child := range v {
			prune(child)
		}
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
