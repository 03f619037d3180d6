package docs

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
)

// TestCLIPage: every command line of docs/cli.md parses with the flags of the command it names (kubecli.CheckArgs),
// its -o table says what each command's help says, and its sample table has the plugin's columns. (Its Role is
// the one test/kube's TestKubectlPlugin applies and runs the plugin with.)
func TestCLIPage(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	blocks := regexp.MustCompile("(?s)```(\\w*)\n(.*?)```").FindAllStringSubmatch(page, -1)
	n := 0
	for _, bl := range blocks {
		switch bl[1] {
		case "sh":
			for line := range strings.Lines(bl[2]) {
				line = strings.TrimSpace(line)
				line, _, _ = strings.Cut(line, " > ") // a redirection
				if s, ok := strings.CutPrefix(line, "source <("); ok {
					line = strings.TrimSuffix(s, ")")
				}
				cmds := kubecli.CommandsIn(line)
				if len(cmds) == 0 {
					t.Errorf("docs/cli.md: %q is not a shutdown-manager command", line)
				}
				for _, c := range cmds {
					n++
					if err := kubecli.CheckArgs(c); err != nil {
						t.Errorf("docs/cli.md: %q: %v", line, err)
					}
				}
			}
		case "":
			if head := strings.Fields(strings.SplitN(bl[2], "\n", 2)[0]); strings.Join(head, " ") != "NAME READY STATUS MODE DRAIN LAST-EVENT AGE" {
				t.Errorf("docs/cli.md: the sample table's header %q is not the plugin's", head)
			}
		}
	}
	if n < 10 {
		t.Errorf("docs/cli.md: %d commands checked; the page has more", n)
	}

	// The -o table: | `command` (...) | `a` (default), `b`, ... |
	row := regexp.MustCompile("(?m)^\\| (`[^|]*`)[^|]* \\| (`[^|]*) \\|$")
	value := regexp.MustCompile("`([a-z]+)`")
	rows := 0
	for _, m := range row.FindAllStringSubmatch(page, -1) {
		if !strings.Contains(m[2], "(default") {
			continue
		}
		var want []string
		for _, v := range value.FindAllStringSubmatch(m[2], -1) {
			want = append(want, v[1])
		}
		for _, name := range strings.Split(m[1], ", ") {
			args := append(strings.Fields(strings.Trim(name, "`")), "-h")
			var out bytes.Buffer
			kubecli.Run(context.Background(), args, nil, &out, &bytes.Buffer{})
			i := strings.Index(out.String(), "output format: ")
			if i < 0 {
				t.Errorf("docs/cli.md: %v has no -o", args)
				continue
			}
			line, _, _ := strings.Cut(out.String()[i+len("output format: "):], " (default")
			if got := strings.Split(strings.TrimSpace(line), ", "); !slices.Equal(got, want) {
				t.Errorf("docs/cli.md: -o of %v is %v, the page says %v", args[:len(args)-1], got, want)
			}
			rows++
		}
	}
	if rows != len(cli.Outputs) {
		t.Errorf("docs/cli.md: %d commands in the -o table, want every command with -o: %d", rows, len(cli.Outputs))
	}
}
