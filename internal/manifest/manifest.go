// Package manifest is inject's and uninject's reading and writing of manifests: a stream of YAML or JSON
// documents, each workload's pod template found by its kind (workload.go), handed to a typed mutation of
// internal/inject, and the mutation's changes merged back into the document as it was read (merge.go), so that
// whatever the mutation did not change keeps its fields, and each document its bytes.
package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// PodFunc is a mutation of one pod (template): inject.Inject with a Config, or inject.Uninject.
type PodFunc func(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error

// Limits on what Manifests reads, so that a wrong file (a log, a dump) or a stream meant for another tool fails
// at once with an error that says so, instead of taking memory in proportion (a YAML document decoded to
// objects takes several times its size). A document over MaxDocumentBytes could never be applied: the API
// server refuses a request body over 3 MiB (and etcd an object over 1.5 MiB). MaxStreamBytes is far over
// any chart's rendering (a few MiB); a larger stream is split and injected in parts.
const (
	MaxDocumentBytes = 3 << 20
	MaxStreamBytes   = 32 << 20
)

// ErrTooLarge is returned (wrapped, naming the limit and the document) by Manifests for a stream over
// MaxStreamBytes or a document over MaxDocumentBytes.
var ErrTooLarge = errors.New("too large")

// Manifests applies fn to the pod of every workload in a stream of YAML documents, and returns the
// stream with those documents re-encoded in their normal form (encodeLike: keys sorted, no comments; the
// differences from the input are listed in docs/install.md, "What uninject gives back"). Every other document, and every workload fn leaves unchanged,
// is written back byte for byte, with its separator line, in order. Errors name the document (1-based
// index, kind, name). A workload fn skips (inject.ErrOptedOut, inject.ErrNoEnvoy) is left unchanged with a note; notes
// (and annotations on the workload instead of its pod template) go to notes.
func Manifests(data []byte, fn PodFunc, notes io.Writer) ([]byte, error) {
	return ManifestsFrom(bytes.NewReader(data), fn, notes)
}

// ManifestsFrom is Manifests over a reader, which it reads one document at a time: what it holds is the
// output and the document at hand, never the whole input. It reads at most MaxStreamBytes, and no
// document over MaxDocumentBytes (ErrTooLarge).
func ManifestsFrom(r io.Reader, fn PodFunc, notes io.Writer) ([]byte, error) {
	return Transform(r, fn, Options{Notes: notes})
}

// Options are what Transform needs beyond the mutation.
type Options struct {
	// Workloads are kinds whose pod template sits where they say (--template-path, see ParseTemplatePath),
	// looked up before the table of known workloads.
	Workloads []Workload
	// Notes gets the notes (workloads left unchanged, and why); nil discards them.
	Notes io.Writer
}

// Transform is ManifestsFrom with Options.
func Transform(r io.Reader, fn PodFunc, opts Options) ([]byte, error) {
	if opts.Notes == nil {
		opts.Notes = io.Discard
	}
	var out bytes.Buffer
	sc := newDocScanner(io.LimitReader(r, MaxStreamBytes+1))
	for i := 1; ; i++ {
		doc, err := sc.next()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		body, err := transformDocument(doc.body, fn, opts, fmt.Sprintf("document %d", i))
		if err != nil {
			return nil, err
		}
		out.Write(doc.separator)
		out.Write(body)
	}
}

// document is one YAML document: the separator line before it ("---…\n", empty for the first document
// when the stream starts without one) and its text.
type document struct{ separator, body []byte }

var separatorLine = regexp.MustCompile(`^---(\s.*)?$`)

// docScanner reads the documents of a YAML stream one at a time, as splitDocuments splits them.
type docScanner struct {
	r     *bufio.Reader
	limit int      // most bytes of one document (MaxDocumentBytes)
	read  int64    // bytes read so far
	cur   document // the document being read (its separator line already read)
	any   bool     // a document was returned
	ended bool     // the input is read to its end
}

func newDocScanner(r io.Reader) *docScanner {
	return &docScanner{r: bufio.NewReaderSize(r, 64<<10), limit: MaxDocumentBytes}
}

func (s *docScanner) tooLarge() error {
	return fmt.Errorf("over %d MiB (%w): no API server takes an object that large (its limit on a request is 3 MiB)", s.limit>>20, ErrTooLarge)
}

// next returns the next document, io.EOF after the last, or an error wrapping ErrTooLarge.
func (s *docScanner) next() (document, error) {
	for !s.ended {
		line, err := s.readLine()
		switch {
		case errors.Is(err, io.EOF):
			s.ended = true
		case err != nil:
			return document{}, err
		}
		if s.read > MaxStreamBytes {
			return document{}, fmt.Errorf("the manifests are over %d MiB (%w): inject them in parts", MaxStreamBytes>>20, ErrTooLarge)
		}
		if len(line) > 0 && separatorLine.Match(bytes.TrimRight(line, "\r\n")) {
			doc := s.cur
			s.cur = document{separator: append([]byte(nil), line...)}
			if doc.separator != nil || len(doc.body) > 0 {
				s.any = true
				return doc, nil
			}
			continue
		}
		if len(s.cur.body)+len(line) > s.limit {
			return document{}, s.tooLarge()
		}
		s.cur.body = append(s.cur.body, line...)
	}
	doc := s.cur
	s.cur = document{}
	if doc.separator != nil || len(doc.body) > 0 || !s.any {
		s.any = true
		return doc, nil
	}
	return document{}, io.EOF
}

// readLine reads one line with its newline (none at the end of the input), valid until the next read; a line
// longer than a document may be is an error.
func (s *docScanner) readLine() ([]byte, error) {
	var long []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		s.read += int64(len(chunk))
		if !errors.Is(err, bufio.ErrBufferFull) {
			if err != nil && !errors.Is(err, io.EOF) {
				err = fmt.Errorf("reading the manifests: %w", err)
			}
			if long == nil {
				return chunk, err
			}
			return append(long, chunk...), err
		}
		if len(long)+len(chunk) > s.limit {
			return nil, s.tooLarge()
		}
		long = append(long, chunk...)
	}
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
func transformDocument(body []byte, fn PodFunc, opts Options, where string) ([]byte, error) {
	js, err := yaml.YAMLToJSON(body)
	if err != nil {
		return nil, fmt.Errorf("%s: not YAML: %w", where, err)
	}
	js = bytes.TrimSpace(js)
	if len(js) == 0 || js[0] != '{' {
		return body, nil // empty, a comment, or not an object: not ours to judge
	}
	var h header
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	where = fmt.Sprintf("%s (%s)", where, h.describe())
	if strings.HasSuffix(h.Kind, "List") {
		return transformList(body, js, fn, opts, where)
	}
	out, changed, err := transformObject(js, h, fn, opts, where)
	if err != nil || !changed {
		return body, err
	}
	return encodeLike(body, out)
}

// encodeLike encodes the object js (JSON) as the document body it came from was written: JSON (as `kubectl
// get -o json` writes it, or on one line) for a document in JSON, else YAML.
func encodeLike(body, js []byte) ([]byte, error) {
	text := bytes.TrimSpace(body)
	if len(text) == 0 || text[0] != '{' {
		return yaml.JSONToYAML(js)
	}
	var out bytes.Buffer
	if i := bytes.IndexByte(text, '\n'); i < 0 {
		out.Write(js)
	} else {
		line := text[i+1:]
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		if err := json.Indent(&out, js, "", string(indent)); err != nil {
			return nil, err
		}
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// transformList applies fn to every workload among a List's items.
func transformList(body, js []byte, fn PodFunc, opts Options, where string) ([]byte, error) {
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
		if err := kjson.UnmarshalCaseSensitivePreserveInts(item, &h); err != nil {
			return nil, fmt.Errorf("%s item %d: %w", where, i+1, err)
		}
		out, c, err := transformObject(item, h, fn, opts, fmt.Sprintf("%s item %d (%s)", where, i+1, h.describe()))
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
	return encodeLike(body, out)
}

// transformObject applies fn to the pod template of one object (JSON), found by its kind (see workloads),
// and returns its JSON when fn changed something. Decoding is strict: a field the Kubernetes API types do
// not know is an error rather than silently dropped. An object of a kind inject does not know that holds an
// Envoy container is an error naming --template-path: it is never passed through silently.
func transformObject(js []byte, h header, fn PodFunc, opts Options, where string) ([]byte, bool, error) {
	w, ok := lookupWorkload(opts.Workloads, h.APIVersion, h.Kind)
	if !ok {
		return js, false, unknownKind(js, h, where)
	}
	if w.New != nil {
		if err := decodeStrict(js, w.New()); err != nil {
			return nil, false, fmt.Errorf("%s: %w", where, err)
		}
	}
	orig, err := decodeValue(js)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	obj, _ := orig.(map[string]any)
	tmpl, ok := lookupPath(obj, w.Template)
	if !ok {
		fmt.Fprintf(opts.Notes, "%s: no pod template at %s; left unchanged\n", where, strings.Join(w.Template, "."))
		return js, false, nil
	}
	if len(w.Template) > 0 {
		if meta, ok := obj["metadata"].(map[string]any); ok {
			annotations, _ := meta["annotations"].(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(annotations)) {
				if strings.HasPrefix(k, inject.Prefix) {
					fmt.Fprintf(opts.Notes, "%s: annotation %s is on the %s itself and has no effect: put it on the pod template (%s.metadata.annotations)\n", where, k, h.Kind, strings.Join(w.Template, "."))
				}
			}
		}
	}
	// The pod: the template's metadata and spec (a Pod's own), as a PodTemplateSpec.
	pod := map[string]any{}
	for _, k := range []string{"metadata", "spec"} {
		if v, ok := tmpl[k]; ok {
			pod[k] = v
		}
	}
	podJS, err := json.Marshal(pod)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	var before, after corev1.PodTemplateSpec
	if err := decodeStrict(podJS, &after); err != nil {
		return nil, false, fmt.Errorf("%s: %s: %w", where, fieldPath(w.Template), err)
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(podJS, &before); err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	err = fn(&after.ObjectMeta, &after.Spec)
	if errors.Is(err, inject.ErrOptedOut) || errors.Is(err, inject.ErrNoEnvoy) {
		fmt.Fprintf(opts.Notes, "%s: %v; left unchanged\n", where, err)
		return js, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	if equality.Semantic.DeepEqual(before, after) {
		return js, false, nil
	}
	changed, err := writeBack(pod, &before, &after)
	if err != nil {
		return nil, false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	for _, k := range []string{"metadata", "spec"} {
		if v, ok := changed[k]; ok {
			tmpl[k] = v
		} else {
			delete(tmpl, k)
		}
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	return out, true, nil
}

// unknownKind is the verdict on an object of a kind that is not a workload inject knows: nil (pass it
// through), unless it is a known kind under another API version, or it holds an Envoy container (as
// inject.IsEnvoyContainer recognises one: named envoy, or running Envoy's image) anywhere.
func unknownKind(js []byte, h header, where string) error {
	if IsWorkloadKind(h.Kind) {
		return fmt.Errorf("%s: apiVersion %q is not supported for %s (if it is another resource of that kind, give its pod template's path: %s)",
			where, h.APIVersion, h.Kind, templateFlag(h.APIVersion, h.Kind, specTemplate))
	}
	v, err := decodeValue(js)
	if err != nil || isRecord(h.APIVersion, h.Kind) {
		return nil
	}
	path, name, ok := findEnvoyAnywhere(v, nil)
	if !ok {
		return nil
	}
	template := path[:max(len(path)-1, 0)] // the template holds the spec that holds the containers
	return fmt.Errorf("%s: %s %s is not a kind inject knows, and it holds an Envoy container (%q in %s): give its pod template's path with %s",
		where, h.APIVersion, h.Kind, name, fieldPath(path), templateFlag(h.APIVersion, h.Kind, template))
}

// findEnvoyAnywhere looks through a decoded object for a list of containers (a "containers" or
// "initContainers" field) holding one that is Envoy's by inject.IsEnvoyContainer, and returns the path of the
// object holding the list and the container's name.
func findEnvoyAnywhere(v any, path []string) ([]string, string, bool) {
	switch v := v.(type) {
	case map[string]any:
		for _, field := range []string{"containers", "initContainers"} {
			list, _ := v[field].([]any)
			for _, c := range list {
				m, _ := c.(map[string]any)
				name, _ := m["name"].(string)
				image, _ := m["image"].(string)
				if inject.IsEnvoyContainer(name, image) {
					return path, name, true
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if p, n, ok := findEnvoyAnywhere(v[k], append(slices.Clip(path), k)); ok {
				return p, n, true
			}
		}
	case []any:
		for i, e := range v {
			if p, n, ok := findEnvoyAnywhere(e, append(slices.Clip(path), strconv.Itoa(i))); ok {
				return p, n, true
			}
		}
	}
	return nil, "", false
}

// lookupPath returns the object at path in obj (obj itself for an empty path).
func lookupPath(obj map[string]any, path []string) (map[string]any, bool) {
	for _, f := range path {
		next, ok := obj[f].(map[string]any)
		if !ok {
			return nil, false
		}
		obj = next
	}
	return obj, obj != nil
}

func fieldPath(path []string) string {
	if len(path) == 0 {
		return "the object itself"
	}
	return strings.Join(path, ".")
}

// writeBack returns pod (the pod template as read) with the changes from before to after applied: see
// applyChanges.
func writeBack(pod map[string]any, before, after *corev1.PodTemplateSpec) (map[string]any, error) {
	var vals [2]any
	for i, v := range []any{before, after} {
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if vals[i], err = decodeValue(enc); err != nil {
			return nil, err
		}
	}
	out, _ := applyChanges(pod, true, vals[0], vals[1])
	m, _ := out.(map[string]any)
	if m == nil {
		return nil, nil
	}
	return m, keepEmpties(pod, m, before, after)
}

// decodeStrict decodes js into obj as the API server does with strict field validation: field names are
// case-sensitive, and a field the type does not know, or one given twice, is an error rather than dropped.
func decodeStrict(js []byte, obj any) error {
	strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// emptyNoise are the fields that Go's encoding of the API types writes as {} or null when a manifest
// leaves them out (struct values and a zero time, which omitempty does not drop). Empty or absent, they
// mean the same; they are dropped from what the mutation adds (see applyChanges).
var emptyNoise = map[string]bool{"creationTimestamp": true, "resources": true, "strategy": true, "updateStrategy": true, "status": true, "metadata": true}

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
