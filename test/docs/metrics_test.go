package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// metricsPage holds the table of the drain side's metrics (it was the README's).
const metricsPage = "docs/observability.md"

// TestMetricsDocumented: every metric the drain side registers (internal/drain, internal/server, internal/manager) has a row in
// the metrics table of docs/observability.md, and every row names a metric that exists.
func TestMetricsDocumented(t *testing.T) {
	readme := readRepo(t, metricsPage)
	table := section(t, readme, "## Metrics")
	defined := map[string]bool{}
	name := regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(shutdown_manager_[a-z_]+)"`)
	for _, dir := range []string{"internal/drain", "internal/server", "internal/manager"} {
		files, err := filepath.Glob(filepath.Join("..", "..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range name.FindAllStringSubmatch(string(data), -1) {
				defined[m[1]] = true
			}
		}
	}
	if len(defined) == 0 {
		t.Fatal("no metric found: this test checks nothing")
	}
	for m := range defined {
		if !strings.Contains(table, "`"+m+"`") && !strings.Contains(table, "`"+m+"{") {
			t.Errorf("metric %s is not in the metrics table of %s", m, metricsPage)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(shutdown_manager_[a-z_]+)").FindAllStringSubmatch(table, -1) {
		if !defined[m[1]] {
			t.Errorf("the metrics table of %s names %s, which the drain side does not register", metricsPage, m[1])
		}
	}
}
