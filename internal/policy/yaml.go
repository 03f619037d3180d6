package policy

import (
	"bytes"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// YAML writes objects as a stream of YAML documents, without the empty fields Go's types would add
// (metadata.creationTimestamp: null).
func YAML(objects ...any) ([]byte, error) {
	var out bytes.Buffer
	for i, o := range objects {
		data, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("encoding %T: %w", o, err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("decoding %T: %w", o, err)
		}
		if meta, ok := m["metadata"].(map[string]any); ok && meta["creationTimestamp"] == nil {
			delete(meta, "creationTimestamp")
		}
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, fmt.Errorf("writing %T as YAML: %w", o, err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(y)
	}
	return out.Bytes(), nil
}

// jsonMarshal is json.Marshal as inject writes the status annotation, as a string.
func jsonMarshal(v any) (string, error) {
	data, err := json.Marshal(v)
	return string(data), err
}
