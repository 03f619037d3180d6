package kubecli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

var yamlSeparator = regexp.MustCompile(`^---(\s.*)?$`)

// manifestsAsJSON turns a stream of YAML documents (inject's output) into JSON as kubectl -o json writes
// objects: one object as itself, several as a v1 List of them (a List's items become its items). Empty
// documents are dropped.
func manifestsAsJSON(stream []byte) ([]byte, error) {
	var docs []json.RawMessage
	var cur bytes.Buffer
	flush := func() error {
		j, err := yaml.YAMLToJSON(cur.Bytes())
		cur.Reset()
		if err != nil {
			return fmt.Errorf("converting to json: %w", err)
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			return nil
		}
		var list struct {
			Kind  string            `json:"kind"`
			Items []json.RawMessage `json:"items"`
		}
		if json.Unmarshal(j, &list) == nil && list.Kind == "List" {
			docs = append(docs, list.Items...)
			return nil
		}
		docs = append(docs, j)
		return nil
	}
	sc := bufio.NewScanner(bytes.NewReader(stream))
	sc.Buffer(nil, len(stream)+1)
	for sc.Scan() {
		if yamlSeparator.MatchString(strings.TrimRight(sc.Text(), "\r")) {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		cur.Write(sc.Bytes())
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	var v any = map[string]any{"apiVersion": "v1", "kind": "List", "items": docs}
	if len(docs) == 1 {
		v = docs[0]
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
