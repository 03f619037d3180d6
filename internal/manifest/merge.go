package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
)

// Writing a mutated object back.
//
// The mutation works on typed objects, but a typed object does not encode back into what was read: Go's
// encoding of the API types adds fields a manifest left out (a status block of zeros for a DaemonSet, a
// StatefulSet or a ReplicaSet, `creationTimestamp: null`, `resources: {}`) and drops fields it set to their
// zero value (`hostNetwork: false`). So the object written back is the object read, with only the changes
// the mutation made: the difference between the typed object's encoding before and after the mutation,
// applied to the document as it was read (as the webhook's patch is the difference of the pod's JSON before
// and after). Everything the mutation did not touch stays as written, and uninject∘inject gives back what
// went in, field for field.

// decodeValue decodes JSON into generic values, numbers kept exact.
func decodeValue(js []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// applyChanges returns orig (the document as read) changed as before became after (the typed object's
// encoding before and after the mutation). present is false when the result is to be left out.
func applyChanges(orig any, hasOrig bool, before, after any) (v any, present bool) {
	if reflect.DeepEqual(before, after) {
		return orig, hasOrig
	}
	switch a := after.(type) {
	case map[string]any:
		b, okB := before.(map[string]any)
		o, okO := orig.(map[string]any)
		if !okB || hasOrig && !okO {
			return fresh(after), true
		}
		out := make(map[string]any, len(o))
		for k, v := range o {
			out[k] = v
		}
		for k, bv := range b {
			if _, ok := a[k]; !ok {
				delete(out, k)
			} else if v, ok := applyChanges(out[k], keyIn(out, k), bv, a[k]); ok {
				out[k] = v
			} else {
				delete(out, k)
			}
		}
		for k, av := range a {
			if _, ok := b[k]; !ok {
				if v := fresh(av); !isEmptyNoise(k, v) {
					out[k] = v
				}
			}
		}
		// A map the change emptied (Envoy's lifecycle without the hook, the annotations without the
		// status) goes, unless the typed object still has something there.
		if len(out) == 0 && len(o) > 0 && isEmpty(fresh(after)) {
			return nil, false
		}
		return out, true
	case []any:
		b, okB := before.([]any)
		o, okO := orig.([]any)
		if !okB || !okO || len(o) != len(b) {
			return fresh(after), true
		}
		pairs := align(b, a)
		out := make([]any, 0, len(a))
		for i, av := range a {
			j, ok := pairs[i]
			if !ok {
				out = append(out, fresh(av))
				continue
			}
			if v, ok := applyChanges(o[j], true, b[j], av); ok {
				out = append(out, v)
			}
		}
		return out, true
	}
	return after, true
}

func keyIn(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// align pairs the elements of after (by index) with those of before they came from: by name when every
// element of both is an object with a distinct name (containers, volumes, variables), else the elements
// that are equal, in order (a longest common subsequence). An element of after without a pair is new.
func align(before, after []any) map[int]int {
	if bn, ok := names(before); ok {
		if an, ok := names(after); ok {
			pairs := map[int]int{}
			for i, n := range an {
				for j, m := range bn {
					if n == m {
						pairs[i] = j
					}
				}
			}
			return pairs
		}
	}
	// lcs[i][j]: the longest common subsequence of before[i:] and after[j:].
	lcs := make([][]int, len(before)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(after)+1)
	}
	for i := len(before) - 1; i >= 0; i-- {
		for j := len(after) - 1; j >= 0; j-- {
			if reflect.DeepEqual(before[i], after[j]) {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	pairs := map[int]int{}
	for i, j := 0, 0; i < len(before) && j < len(after); {
		switch {
		case reflect.DeepEqual(before[i], after[j]):
			pairs[j] = i
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			i++
		default:
			j++
		}
	}
	return pairs
}

// names returns the name of every element, and whether each is an object with a name of its own.
func names(list []any) ([]string, bool) {
	seen := map[string]bool{}
	out := make([]string, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := m["name"].(string)
		if !ok || seen[n] {
			return nil, false
		}
		seen[n], out[i] = true, n
	}
	return out, true
}

// fresh is a value the mutation wrote where the document had none: its encoding without the empty fields
// Go's encoding adds (emptyNoise).
func fresh(v any) any {
	prune(v)
	return v
}

func isEmptyNoise(k string, v any) bool {
	return emptyNoise[k] && isEmpty(v)
}

func isEmpty(v any) bool {
	m, ok := v.(map[string]any)
	return v == nil || ok && len(m) == 0
}

// keepEmpties carries a manifest's empty values through inject and back. To Kubernetes a null, {} or [] field
// is a missing one, but a manifest is given back as it was written: an empty value the mutation filled
// (`lifecycle:` left empty, `env: []`, where the hook and the variables go) is recorded in the status the
// mutation wrote (Status.Empties, with those an earlier injection recorded), and the mutation that removes
// the status writes it back where the field is missing again. read is the pod template as read, out the same
// after applyChanges; before and after are the typed objects.
func keepEmpties(read, out map[string]any, before, after *corev1.PodTemplateSpec) error {
	was, hadStatus, _ := inject.ParseStatus(&before.ObjectMeta)
	now, hasStatus, err := inject.ParseStatus(&after.ObjectMeta)
	if err != nil || !hasStatus {
		if hadStatus {
			for _, p := range slices.Sorted(maps.Keys(was.Empties)) {
				if _, ok := lookupPointer(out, p); !ok {
					setPointer(out, p, emptyLike(was.Empties[p]))
				}
			}
		}
		return nil
	}
	empties := maps.Clone(was.Empties)
	for p, v := range emptyValues(read, "", nil) {
		if got, ok := lookupPointer(out, p); !ok || !reflect.DeepEqual(got, v) {
			if empties == nil {
				empties = map[string]any{}
			}
			empties[p] = v
		}
	}
	if reflect.DeepEqual(empties, now.Empties) || len(empties) == 0 && len(now.Empties) == 0 {
		return nil
	}
	now.Empties = empties
	text, err := json.Marshal(now)
	if err != nil {
		return err
	}
	meta, _ := out["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		return fmt.Errorf("the status annotation is missing from the object written")
	}
	annotations[inject.AnnotationStatus] = string(text)
	return nil
}

// emptyValues adds to found (made when nil) the JSON pointer (RFC 6901) under prefix of every null, {} and []
// in v, with its value.
func emptyValues(v any, prefix string, found map[string]any) map[string]any {
	if found == nil {
		found = map[string]any{}
	}
	visit := func(p string, child any) {
		if isEmptyValue(child) {
			found[p] = child
		} else {
			emptyValues(child, p, found)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			visit(prefix+"/"+pointerEscaper.Replace(k), child)
		}
	case []any:
		for i, child := range v {
			visit(prefix+"/"+strconv.Itoa(i), child)
		}
	}
	return found
}

func isEmptyValue(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// emptyLike is a new value equal to v (null, {} or []), so that no two places of a document share one.
func emptyLike(v any) any {
	switch v.(type) {
	case map[string]any:
		return map[string]any{}
	case []any:
		return []any{}
	}
	return nil
}

var (
	pointerEscaper   = strings.NewReplacer("~", "~0", "/", "~1")
	pointerUnescaper = strings.NewReplacer("~1", "/", "~0", "~")
)

// lookupPointer returns the value at the JSON pointer p in v, and whether there is one.
func lookupPointer(v any, p string) (any, bool) {
	for _, tok := range strings.Split(p, "/")[1:] {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[pointerUnescaper.Replace(tok)]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// setPointer writes v at the JSON pointer p in root, creating the objects on the way that the mutation
// removed (a lifecycle it emptied); a pointer through a list element that is not there is ignored.
func setPointer(root map[string]any, p string, v any) {
	toks := strings.Split(p, "/")[1:]
	if len(toks) == 0 {
		return
	}
	var cur any = root
	for i, tok := range toks {
		last := i == len(toks)-1
		switch c := cur.(type) {
		case map[string]any:
			k := pointerUnescaper.Replace(tok)
			if last {
				c[k] = v
				return
			}
			next := c[k]
			if next == nil {
				next = map[string]any{}
				c[k] = next
			}
			cur = next
		case []any:
			j, err := strconv.Atoi(tok)
			if err != nil || j < 0 || j >= len(c) {
				return
			}
			if last {
				c[j] = v
				return
			}
			cur = c[j]
		default:
			return
		}
	}
}
