package docs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubecli"
)

// sleepExample is the workload docs/migrate.md's sleep section calls envoy.yaml: one Deployment whose Envoy has an
// exec `sleep 15` preStop hook, one with the sleep action.
const sleepExample = "test/docs/testdata/sleep-prestop.yaml"

// TestSleepMigration: the section "From a hand-written `sleep` preStop" of docs/migrate.md, run. Its ```sh lines
// run in order in a directory where envoy.yaml is sleepExample: the first, without --replace-hooks, must be
// refused with exactly the ```text block's line; the others must exit 0, and uninject must give back the example's
// objects, field for field. The section's yaml blocks, if any, must be lines of the example or of inject's output.
func TestSleepMigration(t *testing.T) {
	asRelease(t)
	page := readRepo(t, "docs/migrate.md")
	sec := section(t, page, "## From a hand-written `sleep` preStop")
	example := []byte(readRepo(t, sleepExample))
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "envoy.yaml"), example, 0o644); err != nil {
		t.Fatal(err)
	}
	texts := doctable.Blocks(sec, "text")
	if len(texts) != 1 {
		t.Fatalf("want one text block (inject's refusal), got %d", len(texts))
	}
	var lines []string
	for _, b := range doctable.Blocks(sec, "sh") {
		lines = append(lines, strings.Split(strings.TrimSpace(b), "\n")...)
	}
	if len(lines) < 3 {
		t.Fatalf("%d command lines: want the refusal, inject --replace-hooks and uninject", len(lines))
	}
	for i, line := range lines {
		w := shellWords(line)
		if w[0] != "shutdown-manager" {
			t.Fatalf("%q: only shutdown-manager lines are run here", line)
		}
		args, out := w[1:], ""
		if j := slices.Index(args, ">"); j >= 0 {
			args, out = args[:j], args[j+1]
		}
		for j, a := range args {
			if strings.HasSuffix(a, ".yaml") {
				args[j] = filepath.Join(wd, a)
			}
		}
		var stdout, stderr bytes.Buffer
		code := kubecli.Run(context.Background(), args, nil, &stdout, &stderr)
		if i == 0 {
			want := "shutdown-manager inject: " + strings.TrimSpace(texts[0])
			if code != 1 || !strings.Contains(stderr.String(), want+"\n") {
				t.Errorf("%q: exit %d, stderr:\n%s\nwant exit 1 and the line:\n%s", line, code, stderr.String(), want)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("%q: exit %d: %s", line, code, stderr.String())
		}
		if out != "" {
			if err := os.WriteFile(filepath.Join(wd, out), stdout.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if args[0] == "inject" && !bytes.Contains(stdout.Bytes(), []byte(`"replacedPreStop":{"sleep":{"seconds":15}}`)) {
			t.Errorf("%q: the status annotation does not record the replaced sleep action", line)
		}
		if args[0] == "uninject" {
			checkRoundTrip(t, line, example, stdout.Bytes())
		}
	}
	injected, err := os.ReadFile(filepath.Join(wd, "envoy-injected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sources := [][]string{strings.Split(string(example), "\n"), strings.Split(string(injected), "\n")}
	for _, b := range doctable.Blocks(sec, "yaml") {
		if !isExcerpt(b, sources) {
			t.Errorf("yaml block is not lines of %s or of inject's output:\n%s", sleepExample, b)
		}
	}
}
