package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/yamljson"
)

// OutputFlag registers -o (and --output, ParseArgs) with the command's choices (Outputs), the first the
// default.
func OutputFlag(fs *flag.FlagSet) *string {
	choices := Outputs[fs.Name()]
	return fs.String("o", choices[0], "output format: "+strings.Join(choices, ", "))
}

// Outputs are the -o choices of each command that has -o, by FlagSet name, the default first; help and
// completion read them.
var Outputs = map[string][]string{
	"status":         {"table", "json", "yaml"},
	"version":        {"text", "json"},
	"inject":         {"yaml", "json"},
	"uninject":       {"yaml", "json"},
	"kubectl status": {"table", "wide", "json", "yaml"},
	"kubectl check":  {"table", "json", "yaml"},
	"check":          {"table", "json", "yaml"},
}

// CheckOutput refuses an -o value that is not one of the command's choices.
func CheckOutput(fs *flag.FlagSet, value string) error {
	if choices := Outputs[fs.Name()]; !slices.Contains(choices, value) {
		return Usagef("-o: %q is not one of %s", value, strings.Join(choices, ", "))
	}
	return nil
}

// WriteStructured writes v as indented JSON or as YAML.
func WriteStructured(w io.Writer, format string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", format, err)
	}
	if format == "yaml" {
		if b, err = yamljson.JSONToYAML(b); err != nil {
			return fmt.Errorf("encoding yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
