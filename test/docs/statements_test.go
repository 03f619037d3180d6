package docs

// One-line checks of statements a newcomer found wrong (issue 21 item 3): each test reads what the README, the
// docs/ pages, the chart's README, deploy/'s comments or a generator say, and the code or manifest that says
// otherwise. A statement that moved from the README into a docs/ page is checked in that page.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/doctable"
)

func readRepo(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section is doctable.Section, failing t when the page has no such heading.
func section(t *testing.T, page, heading string) string {
	t.Helper()
	s, err := doctable.Section(page, heading)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestE2EEventsSentences: the e2e asserts the DrainStarted and Drained Events of the pods it deletes in hook and
// agent mode, and neither docs/e2e.md (the README's e2e section, moved) nor the report it writes says they are not
// asserted.
func TestE2EEventsSentences(t *testing.T) {
	e2e := readRepo(t, "test/e2e/e2e_test.go")
	if !strings.Contains(e2e, `want DrainStarted and Drained`) {
		t.Fatal("test/e2e/e2e_test.go no longer asserts DrainStarted and Drained: say so in the README and the report (test/e2e/report_test.go), then here")
	}
	notAsserted := regexp.MustCompile(`(?i)(not|never|without) assert`)
	for _, f := range []struct{ path, text string }{
		{"docs/e2e.md", readRepo(t, "docs/e2e.md")},
		{"test/e2e/report_test.go", readRepo(t, "test/e2e/report_test.go")},
		{"test/e2e/results/REPORT.md", readRepo(t, "test/e2e/results/REPORT.md")},
	} {
		flat := strings.Join(strings.Fields(strings.NewReplacer(`\n")`, " ", `b.WriteString("`, " ", `\"`, `"`).Replace(f.text)), " ")
		if m := notAsserted.FindString(flat); m != "" {
			t.Errorf("%s says the Events are %q asserted; the e2e asserts DrainStarted and Drained", f.path, m)
		}
		if !regexp.MustCompile(`(asserts|fails unless).{0,80}DrainStarted and Drained`).MatchString(flat) {
			t.Errorf("%s does not say the e2e asserts DrainStarted and Drained", f.path)
		}
	}
}

// TestQuickStartCost: the Quick start names everything the first `make test` builds (what scripts/test.sh,
// the Makefile's test target, installs and builds) and gives its cold cost, more than the warm figure the
// Development table (docs/development.md) gives.
func TestQuickStartCost(t *testing.T) {
	readme := readRepo(t, "README.md")
	quick := section(t, readme, "## Quick start")
	if !regexp.MustCompile(`(?m)^test:\n\t\./scripts/test\.sh$`).MatchString(readRepo(t, "Makefile")) {
		t.Fatal("the Makefile's test target does not run scripts/test.sh")
	}
	script := readRepo(t, "scripts/test.sh")
	builds := map[string][]string{"make envoy": {"Envoy"}, "scripts/kube-binaries.sh": {"kube-apiserver", "`make kube`"}, "scripts/helm-binary.sh": {"Helm", "`make helm`"}}
	for build, words := range builds {
		if !strings.Contains(script, strings.TrimPrefix(build, "scripts/")) {
			t.Errorf("scripts/test.sh no longer runs %s: say in this test what make test builds instead", build)
		}
		for _, w := range words {
			if !strings.Contains(quick, w) {
				t.Errorf("make test runs %s; the Quick start does not say %q", build, w)
			}
		}
	}
	cold := regexp.MustCompile("cold `make test` takes about (\\d+) min").FindStringSubmatch(strings.Join(strings.Fields(quick), " "))
	warm := regexp.MustCompile(`about (\d+) min in all`).FindStringSubmatch(readRepo(t, "docs/development.md"))
	if cold == nil || warm == nil {
		t.Fatalf("Quick start's cold figure %q, Development's warm figure %q: want both", cold, warm)
	}
	if c, w := atoi(t, cold[1]), atoi(t, warm[1]); c <= w {
		t.Errorf("a cold make test (%d min) cannot take less than a warm one (%d min)", c, w)
	}
	if !strings.Contains(quick, "about "+warm[1]+" min") {
		t.Errorf("the Quick start does not give the warm figure of the Development table (about %s min)", warm[1])
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// drainReasons are the values of internal/events' Reason constants: the Events a drain records.
func drainReasons(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../internal/events/events.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && strings.HasPrefix(vs.Names[0].Name, "Reason") && len(vs.Values) == 1 {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				reasons = append(reasons, s)
			}
		}
		return true
	})
	if len(reasons) < 2 {
		t.Fatalf("internal/events/events.go: reasons %q", reasons)
	}
	return reasons
}

// TestRBACStatements: where docs/observability.md, the chart's README and the RBAC files list the Events the manager
// records, they list every reason internal/events has, and where they say what the rules allow, they say the
// verbs the rules really grant (deploy/common/envoy-events-rbac.yaml and the chart's templates).
func TestRBACStatements(t *testing.T) {
	reasons := drainReasons(t)
	// The one list, as every file writes it: DrainStarted, then the outcome of the drain.
	list := reasons[0] + ", then one of " + strings.Join(reasons[1:], ", ")
	if reasons[0] != "DrainStarted" {
		t.Fatalf("internal/events lists %s first; the files list DrainStarted first", reasons[0])
	}
	flat := func(s string) string {
		return strings.Join(strings.Fields(strings.NewReplacer("#", " ", "{{-", " ", "*/", " ", "/*", " ").Replace(s)), " ")
	}
	for _, f := range []string{"deploy/common/envoy-events-rbac.yaml", "charts/shutdown-manager/README.md", "charts/shutdown-manager/templates/events-rbac.yaml"} {
		if !strings.Contains(flat(readRepo(t, f)), "("+list+")") {
			t.Errorf("%s does not list the Events as (%s)", f, list)
		}
	}
	readme := readRepo(t, "docs/observability.md")
	for _, r := range reasons {
		if !strings.Contains(readme, "| `"+r+"` |") {
			t.Errorf("the table of Events in docs/observability.md lacks %s", r)
		}
	}
	webhook := readRepo(t, "internal/webhook/handler.go")
	m := regexp.MustCompile(`ReasonNotInjected = "(\w+)"`).FindStringSubmatch(webhook)
	if m == nil || !strings.Contains(flat(readRepo(t, "charts/shutdown-manager/README.md")), "records an Event, "+m[1]+",") {
		t.Errorf("the chart's README does not name the webhook's Event (%q)", m)
	}

	// The verbs: every rule of the three files grants the same ones, and the texts name exactly those.
	verbRE := regexp.MustCompile(`verbs: \[([^\]]*)\]`)
	var verbs []string
	for _, f := range []string{"deploy/common/envoy-events-rbac.yaml", "charts/shutdown-manager/templates/events-rbac.yaml", "charts/shutdown-manager/templates/webhook-rbac.yaml"} {
		ms := verbRE.FindAllStringSubmatch(readRepo(t, f), -1)
		if len(ms) == 0 {
			t.Fatalf("%s has no rule", f)
		}
		for _, m := range ms {
			var got []string
			for _, v := range strings.Split(m[1], ",") {
				got = append(got, strings.Trim(strings.TrimSpace(v), `"`))
			}
			if verbs == nil {
				verbs = got
			}
			if !slices.Equal(got, verbs) {
				t.Errorf("%s grants %v, another rule %v", f, got, verbs)
			}
		}
	}
	// The audit's role (its own file): get of the configuration, list of what it reads; the README says so.
	audit := verbRE.FindAllStringSubmatch(readRepo(t, "charts/shutdown-manager/templates/webhook-audit-rbac.yaml"), -1)
	if len(audit) != 2 || audit[0][1] != "get" || audit[1][1] != "list" ||
		!strings.Contains(flat(readRepo(t, "charts/shutdown-manager/README.md")), "to get its MutatingWebhookConfiguration and list namespaces, pods and events; nothing else") {
		t.Errorf("webhook-audit-rbac.yaml grants %q; the chart's README must say it gets the configuration and lists namespaces, pods and events", audit)
	}
	said := strings.Join(verbs, " and ")
	for _, f := range []struct{ path, text string }{
		{"deploy/common/envoy-events-rbac.yaml", "allowed only to " + said + " Events"},
		{"charts/shutdown-manager/README.md", "That takes " + said + " on `events.k8s.io` `events`"},
		{"charts/shutdown-manager/README.md", "allowed to " + said + " events cluster-wide"},
		{"docs/observability.md", "a Role allowing only `" + strings.Join(verbs, "` and `") + "` of `events.k8s.io` Events"},
		{"docs/webhook.md", "the chart grants `" + strings.Join(verbs, "` and `") + "` on events"},
	} {
		if !strings.Contains(flat(readRepo(t, f.path)), f.text) {
			t.Errorf("%s does not say %q (the rules grant %v)", f.path, f.text, verbs)
		}
	}
}

// TestSleepActionVersion: every page that gives a Kubernetes version for the preStop sleep action gives the same
// one, 1.34, where the action is GA (KEP-3960: alpha 1.29, beta 1.30, GA 1.34) and the oldest line the chart
// installs on (Chart.yaml's kubeVersion).
func TestSleepActionVersion(t *testing.T) {
	const want = "1.34"
	if !strings.Contains(readRepo(t, "charts/shutdown-manager/Chart.yaml"), `kubeVersion: ">= `+want+`.0-0"`) {
		t.Errorf("Chart.yaml's kubeVersion is not >= %s: change the sleep action's version on every page with it", want)
	}
	pages := append(userPages(t), "charts/shutdown-manager/README.md", "charts/shutdown-manager/values.yaml")
	version := regexp.MustCompile(`\b1\.\d\d\b`)
	found := 0
	for _, p := range pages {
		for i, line := range strings.Split(readRepo(t, p), "\n") {
			if !strings.Contains(line, "`sleep`") {
				continue
			}
			for _, v := range version.FindAllString(line, -1) {
				found++
				if v != want {
					t.Errorf("%s:%d gives Kubernetes %s for the sleep action, want %s: %s", p, i+1, v, want, strings.TrimSpace(line))
				}
			}
		}
	}
	if found == 0 {
		t.Error("no page gives the sleep action's Kubernetes version")
	}
}
