package kubecli

import (
	"bytes"
	"strings"
	"testing"
)

// Parse errors spell flags as the help and the docs do: two dashes for a long name, one for a letter.
func TestParseErrorsSpellFlagsAsTheHelp(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"drain", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"drain", "-bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"drain", "--drain-timeout=abc"}, `invalid value "abc" for flag --drain-timeout`},
		{[]string{"drain", "--drain-timeout"}, "flag needs an argument: --drain-timeout"},
		{[]string{"resume", "--force=maybe"}, `invalid boolean value "maybe" for --force`},
		{[]string{"status", "-o"}, "flag needs an argument: -o"},
		{[]string{"policy", "-f", "x.yaml"}, "flag provided but not defined: -f"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		if code := Run(t.Context(), tc.args, strings.NewReader(""), &stdout, &stderr); code != ExitUsage {
			t.Errorf("%q: exit %d, want %d", tc.args, code, ExitUsage)
		}
		if got := stderr.String(); !strings.Contains(got, tc.want) {
			t.Errorf("%q: stderr %q, want it to contain %q", tc.args, got, tc.want)
		}
	}
}
