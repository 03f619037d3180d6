package inject

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// PodFunc is a mutation of one pod (template): Inject with a Config, or Uninject.
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
// stream with those documents re-encoded. Every other document, and every workload fn leaves unchanged,
// is written back byte for byte, with its separator line, in order. Errors name the document (1-based
// index, kind, name). A workload fn skips (ErrOptedOut, ErrNoEnvoy) is left unchanged with a note; notes
// (and annotations on the workload instead of its pod template) go to notes.
func Manifests(data []byte, fn PodFunc, notes io.Writer) ([]byte, error) {
	return ManifestsFrom(bytes.NewReader(data), fn, notes)
}

// ManifestsFrom is Manifests over a reader, which it reads one document at a time: what it holds is the
// output and the document at hand, never the whole input. It reads at most MaxStreamBytes, and no
// document over MaxDocumentBytes (ErrTooLarge).
func ManifestsFrom(r io.Reader, fn PodFunc, notes io.Writer) ([]byte, error) {
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
		body, err := transformDocument(doc.body, fn, notes, fmt.Sprintf("document %d", i))
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
func transformDocument(body []byte, fn PodFunc, notes io.Writer, where string) ([]byte, error) {
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
		return transformList(body, js, fn, notes, where)
	}
	out, changed, err := transformObject(js, h, fn, notes, where)
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
func transformList(body, js []byte, fn PodFunc, notes io.Writer, where string) ([]byte, error) {
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
	return encodeLike(body, out)
}

// transformObject decodes one object (JSON) into its typed workload, applies fn to its pod, and returns
// its JSON when fn changed something. Decoding is strict: a field the Kubernetes API types do not know is
// an error rather than silently dropped.
func transformObject(js []byte, h header, fn PodFunc, notes io.Writer, where string) ([]byte, bool, error) {
	w, ok := LookupWorkload(h.APIVersion, h.Kind)
	if !ok {
		if IsWorkloadKind(h.Kind) {
			return nil, false, fmt.Errorf("%s: apiVersion %q is not supported for %s", where, h.APIVersion, h.Kind)
		}
		return js, false, nil
	}
	obj := w.New()
	if err := decodeStrict(js, obj); err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	before := w.New()
	if err := kjson.UnmarshalCaseSensitivePreserveInts(js, before); err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	if outer, ok := obj.(metav1.Object); ok && h.Kind != "Pod" {
		for k := range outer.GetAnnotations() {
			if strings.HasPrefix(k, Prefix) {
				fmt.Fprintf(notes, "%s: annotation %s is on the %s itself and has no effect: put it on the pod template (spec.template.metadata.annotations)\n", where, k, h.Kind)
			}
		}
	}
	meta, spec := w.Pod(obj)
	err := fn(meta, spec)
	if errors.Is(err, ErrOptedOut) || errors.Is(err, ErrNoEnvoy) {
		fmt.Fprintf(notes, "%s: %v; left unchanged\n", where, err)
		return js, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", where, err)
	}
	if equality.Semantic.DeepEqual(before, obj) {
		return js, false, nil
	}
	out, err := writeBack(js, before, obj)
	if err != nil {
		return nil, false, fmt.Errorf("%s: encoding: %w", where, err)
	}
	return out, true, nil
}

// writeBack returns the document js with the changes from before to after (typed objects) applied: see
// applyChanges.
func writeBack(js []byte, before, after any) ([]byte, error) {
	var vals [3]any
	for i, v := range []any{before, after} {
		enc, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		if vals[i], err = decodeValue(enc); err != nil {
			return nil, err
		}
	}
	orig, err := decodeValue(js)
	if err != nil {
		return nil, err
	}
	out, _ := applyChanges(orig, true, vals[0], vals[1])
	return json.Marshal(out)
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
