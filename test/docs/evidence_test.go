package docs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The evidence on the pages (figures of a run: requests sent and failed, drain and pod times, the run's date) is
// generated from the committed result file it cites, between markers:
//
//	<!-- BEGIN evidence NAME from FILE: do not edit; go test ./test/docs -run TestEvidence -update -->
//	…
//	<!-- END evidence NAME -->
//
// NAME is one of evidenceBlocks, FILE the file that block is rendered from. A block may be a table (the markers on
// lines of their own) or a few words inside a sentence (the markers inline). TestEvidence fails when a block is
// not what its file gives; -update rewrites the blocks, so a new run's result file needs only that.
var (
	evidenceBegin = regexp.MustCompile(`<!-- BEGIN evidence ([a-z0-9-]+) from (\S+): do not edit; go test \./test/docs -run TestEvidence -update -->`)
	evidenceEnd   = regexp.MustCompile(`<!-- END evidence ([a-z0-9-]+) -->`)
)

// The committed result files the pages cite.
const (
	e2eReportFile      = "test/e2e/results/REPORT.md"
	fleetReportFile    = "test/e2e/results/FLEET.md"
	timelineRunFile    = "docs/timeline/run.txt"
	timelineEventsFile = "docs/timeline/events.csv"
	benchReportFile    = "bench/results/REPORT.md"
	sweepReportFile    = "bench/results/SWEEP.md"
	webhookRunFile     = "bench/results/webhook.json"
)

// evidenceBlock renders one kind of block from the text of its result file.
type evidenceBlock struct {
	file   string
	render func(text string) (string, error)
}

// evidenceBlocks are the blocks a page may hold, by name.
var evidenceBlocks = map[string]evidenceBlock{
	"e2e-scenarios":         {e2eReportFile, renderE2EScenarios},
	"e2e-latest":            {e2eReportFile, renderE2ELatest},
	"lb-scenarios":          {e2eReportFile, renderLBScenarios},
	"lb-summary":            {e2eReportFile, renderLBSummary},
	"lb-sessions":           {e2eReportFile, renderLBSessions},
	"contour-e2e":           {e2eReportFile, renderContourE2E},
	"eg-e2e":                {e2eReportFile, renderEGE2E},
	"fleet-written":         {fleetReportFile, renderFleetWritten},
	"fleet-scenarios":       {fleetReportFile, renderFleetScenarios},
	"fleet-contour":         {fleetReportFile, renderFleetContour},
	"fleet-contour-summary": {fleetReportFile, renderFleetContourSummary},
	"fleet-contour-lb":      {fleetReportFile, renderFleetContourLB},
	"timeline-waited":       {timelineEventsFile, renderTimelineWaited},
	"timeline-exit":         {timelineEventsFile, renderTimelineExit},
	"timeline-requests":     {timelineRunFile, renderTimelineRequests},
	"bench-written":         {benchReportFile, renderBenchWritten},
	"bench-headlines":       {benchReportFile, renderBenchHeadlines},
	"sweep-goal":            {sweepReportFile, renderSweepGoal},
	"sweep-summary":         {sweepReportFile, renderSweepSummary},
	"webhook-committed":     {webhookRunFile, renderWebhookCommitted},
}

// evidenceSpan is one generated block of a page: its name, the file it names, and where its content is.
type evidenceSpan struct {
	name, file string
	start, end int // the content: text[start:end], between the markers
}

// evidenceSpans finds the generated blocks of a page, in order.
func evidenceSpans(text string) ([]evidenceSpan, error) {
	var spans []evidenceSpan
	rest := 0
	for {
		b := evidenceBegin.FindStringSubmatchIndex(text[rest:])
		if b == nil {
			break
		}
		name, file := text[rest+b[2]:rest+b[3]], text[rest+b[4]:rest+b[5]]
		start := rest + b[1]
		e := evidenceEnd.FindStringSubmatchIndex(text[start:])
		if e == nil {
			return nil, fmt.Errorf("the generated block %s has no end marker", name)
		}
		if got := text[start+e[2] : start+e[3]]; got != name {
			return nil, fmt.Errorf("the generated block %s ends with the marker of %s", name, got)
		}
		if n := evidenceBegin.FindStringIndex(text[start : start+e[0]]); n != nil {
			return nil, fmt.Errorf("the generated block %s holds another block's begin marker", name)
		}
		spans = append(spans, evidenceSpan{name: name, file: file, start: start, end: start + e[0]})
		rest = start + e[1]
	}
	if n := len(evidenceEnd.FindAllStringIndex(stripSpans(text, spans), -1)); n != len(spans) {
		return nil, fmt.Errorf("%d end markers of generated blocks for %d begin markers", n, len(spans))
	}
	return spans, nil
}

// stripSpans is text without the generated blocks' content (their markers stay).
func stripSpans(text string, spans []evidenceSpan) string {
	var b strings.Builder
	at := 0
	for _, s := range spans {
		b.WriteString(text[at:s.start])
		at = s.end
	}
	b.WriteString(text[at:])
	return b.String()
}

// TestEvidence: every generated block on a user page is what its result file gives. `go test ./test/docs -run
// TestEvidence -update` rewrites them.
func TestEvidence(t *testing.T) {
	used := map[string]bool{}
	for _, page := range userPages(t) {
		text := readRepo(t, page)
		spans, err := evidenceSpans(text)
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		var b strings.Builder
		at := 0
		for _, s := range spans {
			used[s.name] = true
			blk, ok := evidenceBlocks[s.name]
			if !ok {
				t.Errorf("%s: a generated block %s: no such block (test/docs/evidence_test.go's evidenceBlocks)", page, s.name)
				continue
			}
			if s.file != blk.file {
				t.Errorf("%s: the block %s says it is from %s; it is generated from %s", page, s.name, s.file, blk.file)
				continue
			}
			got, err := blk.render(readRepo(t, blk.file))
			if err != nil {
				t.Errorf("%s: the block %s: %s: %v", page, s.name, blk.file, err)
				continue
			}
			b.WriteString(text[at:s.start])
			b.WriteString(got)
			at = s.end
		}
		b.WriteString(text[at:])
		want := b.String()
		if t.Failed() || want == text {
			continue
		}
		if *update {
			if err := os.WriteFile(filepath.Join("..", "..", page), []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: a generated block is not what its result file gives: run go test ./test/docs -run TestEvidence -update and review the diff", page)
	}
	for name := range evidenceBlocks {
		if !used[name] {
			t.Errorf("no page holds the generated block %s: remove it from evidenceBlocks or put it where its figures are quoted", name)
		}
	}
}

// runFigure is a figure of a run quoted in prose: "N of M" with M of three digits or more (requests, connections).
var runFigure = regexp.MustCompile(`\b\d[\d,]* of \d{1,3}(,\d{3})+\b|\b\d[\d,]* of \d{3,}\b`)

// TestEvidenceNotQuoted: outside the generated blocks, no user page quotes a run's count as "N of M" (M >= 100):
// such a figure goes stale with the next run; it belongs in a block generated from the result file.
func TestEvidenceNotQuoted(t *testing.T) {
	for _, page := range userPages(t) {
		text := readRepo(t, page)
		spans, err := evidenceSpans(text)
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		for i, line := range strings.Split(stripSpans(text, spans), "\n") {
			if m := runFigure.FindString(line); m != "" {
				t.Errorf("%s: %q quotes a run's figure outside a generated block (line %d of the page without its blocks): generate it from the result file (test/docs/evidence_test.go) or drop it", page, m, i+1)
			}
		}
	}
}

// mdTable is a Markdown table of a result file: its header and its rows, cells trimmed.
type mdTable struct {
	cols []string
	rows [][]string
}

// get is the cell of column col in row r, "" when the table has no such column.
func (tb mdTable) get(r []string, col string) string {
	for i, c := range tb.cols {
		if c == col && i < len(r) {
			return r[i]
		}
	}
	return ""
}

// need fails when the table lacks one of the columns.
func (tb mdTable) need(cols ...string) error {
	for _, c := range cols {
		if !tb.has(c) {
			return fmt.Errorf("a table (%s) has no column %q", strings.Join(tb.cols, " | "), c)
		}
	}
	return nil
}

func (tb mdTable) has(col string) bool {
	for _, c := range tb.cols {
		if c == col {
			return true
		}
	}
	return false
}

// mdTables are the tables of a Markdown text: a row of cells followed by a delimiter row, then rows to the first
// line that is not one.
func mdTables(text string) []mdTable {
	lines := strings.Split(text, "\n")
	delim := regexp.MustCompile(`^\|(\s*:?-+:?\s*\|)+$`)
	var out []mdTable
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "|") || !delim.MatchString(strings.TrimSpace(lines[i+1])) {
			continue
		}
		tb := mdTable{cols: mdCells(lines[i])}
		j := i + 2
		for ; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
			tb.rows = append(tb.rows, mdCells(lines[j]))
		}
		out = append(out, tb)
		i = j - 1
	}
	return out
}

// mdCells splits a table row on its unescaped pipes.
func mdCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	line = strings.TrimSuffix(line, "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// e2eRow is one scenario of REPORT.md, from either of its tables (the scenarios; Contour's pod).
type e2eRow struct {
	name, setup, action, kinds, p99, drain, gone, result, note, hooks string
	sent, failed                                                      int
	peer                                                              bool // a row of the Contour section
}

// e2eReport is what the pages quote of REPORT.md.
type e2eReport struct {
	written string // "2026-11-26 19:22 UTC"
	took    string // the run's duration, from its summary line ("" in reports written before it had one)
	rows    []e2eRow
}

var (
	e2eWritten = regexp.MustCompile(`(?m)^Written by test/e2e on (\d{4}-\d\d-\d\d \d\d:\d\d UTC)\.`)
	// The summary line test/e2e/report_test.go writes.
	e2eSummary = regexp.MustCompile(`(?m)^Scenarios: (\d+) passed, (\d+) reported only, (\d+) failed, of (\d+); (\S+) from the start of the test to this report\.$`)
)

func parseE2EReport(text string) (e2eReport, error) {
	var rep e2eReport
	m := e2eWritten.FindStringSubmatch(text)
	if m == nil {
		return rep, fmt.Errorf("no line %q", e2eWritten)
	}
	rep.written = m[1]
	for _, tb := range mdTables(text) {
		if !tb.has("scenario") || !tb.has("result") {
			continue
		}
		peer := tb.has("manager")
		want := []string{"scenario", "injection", "action", "sent", "failed", "failed by kind", "p99", "drain (manager's log)", "old pods gone after", "result", "note"}
		if peer {
			want = []string{"scenario", "manager", "action", "sent", "failed", "failed by kind", "p99", "drain (our log)", "FailedPreStopHook", "time to go", "result"}
		}
		if err := tb.need(want...); err != nil {
			return rep, err
		}
		for _, r := range tb.rows {
			row := e2eRow{
				name: tb.get(r, "scenario"), action: tb.get(r, "action"), kinds: tb.get(r, "failed by kind"), p99: tb.get(r, "p99"),
				result: tb.get(r, "result"), peer: peer,
			}
			var err1, err2 error
			row.sent, err1 = strconv.Atoi(tb.get(r, "sent"))
			row.failed, err2 = strconv.Atoi(tb.get(r, "failed"))
			if err1 != nil || err2 != nil {
				return rep, fmt.Errorf("the row %s: sent %q, failed %q: not numbers", row.name, tb.get(r, "sent"), tb.get(r, "failed"))
			}
			if peer {
				row.setup, row.drain, row.hooks = tb.get(r, "manager"), tb.get(r, "drain (our log)"), tb.get(r, "FailedPreStopHook")
				row.gone = strings.TrimPrefix(tb.get(r, "time to go"), "old pods gone after ")
			} else {
				row.setup, row.drain, row.gone, row.note = tb.get(r, "injection"), tb.get(r, "drain (manager's log)"), tb.get(r, "old pods gone after"), tb.get(r, "note")
			}
			switch row.result {
			case "pass", "FAIL", "reported":
			default:
				return rep, fmt.Errorf("the row %s: result %q, want pass, FAIL or reported", row.name, row.result)
			}
			rep.rows = append(rep.rows, row)
		}
	}
	if len(rep.rows) == 0 {
		return rep, fmt.Errorf("no scenario rows")
	}
	if m := e2eSummary.FindStringSubmatch(text); m != nil {
		pass, reported, failed := rep.count()
		if got, want := strings.Join(m[1:5], " "), fmt.Sprint(pass, reported, failed, len(rep.rows)); got != want {
			return rep, fmt.Errorf("its summary line counts %s (passed, reported only, failed, of), its rows %s", got, want)
		}
		rep.took = m[5]
	}
	return rep, nil
}

// count is how many rows passed, were reported only, and failed.
func (rep e2eReport) count() (pass, reported, failed int) {
	for _, r := range rep.rows {
		switch r.result {
		case "pass":
			pass++
		case "reported":
			reported++
		default:
			failed++
		}
	}
	return pass, reported, failed
}

func (rep e2eReport) row(name string) (e2eRow, error) {
	for _, r := range rep.rows {
		if r.name == name {
			return r, nil
		}
	}
	return e2eRow{}, fmt.Errorf("no scenario %s", name)
}

// failedOfSent is "failed / sent", the failed count bold when not 0, with the kinds of failure.
func failedOfSent(failed, sent int, kinds string) string {
	if failed == 0 {
		return fmt.Sprintf("0 / %d", sent)
	}
	s := fmt.Sprintf("**%d** / %d", failed, sent)
	if kinds != "" && kinds != "–" {
		s += " (" + kinds + ")"
	}
	return s
}

// thousands writes n with a comma every three digits, as the pages' prose does.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// renderE2EScenarios is docs/e2e.md's table: every scenario of the report, both sections.
func renderE2EScenarios(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("\n| scenario | injection (or manager) | action | failed / sent | drain (the manager's log) | old pods gone after | result | note |\n")
	b.WriteString("|---|---|---|---:|---|---|---|---|\n")
	for _, r := range rep.rows {
		drain, note := r.drain, r.note
		if r.peer {
			drain = strings.Trim(drain+"; FailedPreStopHook: "+r.hooks, "; ")
		}
		if drain == "" {
			drain = "–"
		}
		if strings.HasPrefix(note, "Events: ") {
			// Asserted (DrainStarted and Drained among them); the report lists them.
			note = "Events as asserted (the report lists them)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.setup, r.action, failedOfSent(r.failed, r.sent, r.kinds),
			drain, r.gone, r.result, note)
	}
	return b.String(), nil
}

// renderContourE2E is docs/migrate-contour.md's table: the report's rows of Contour's pod on the real kubelet, as
// shipped and taken over, side by side (the run's date, then a row each).
func renderContourE2E(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n`make e2e`, run written %s: Contour's Envoy pod under load on the real kubelet ([e2e.md](e2e.md))", rep.written)
	if slices.ContainsFunc(rep.rows, func(r e2eRow) bool { return r.name == "contour-page" }) {
		b.WriteString("; `contour-page`, this page's commands run as written against the whole of Contour, without load\n([e2e.md](e2e.md#the-contour-page))")
	}
	if slices.ContainsFunc(rep.rows, func(r e2eRow) bool { return r.name == "contour-page-webhook" }) {
		b.WriteString("; `contour-page-webhook`, its webhook section's the same way")
	}
	b.WriteString(".\n\n")
	b.WriteString("| scenario | manager | action | failed / sent | drain (the manager's log) | FailedPreStopHook | old pods gone after | result |\n")
	b.WriteString("|---|---|---|---:|---|---|---|---|\n")
	rows, err := peerRowsOf(rep.rows, "contour-")
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		hooks, _, _ := strings.Cut(r.hooks, " (")
		drain := r.drain
		if drain == "" {
			drain = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.setup, r.action,
			failedOfSent(r.failed, r.sent, r.kinds), drain, hooks, strings.TrimPrefix(r.gone, "old pods gone after "), r.result)
	}
	return b.String(), nil
}

// renderEGE2E is docs/migrate-envoy-gateway.md's table: the report's rows of Envoy Gateway's pod on the real
// kubelet (the run's date, then a row each).
func renderEGE2E(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n`make e2e`, run written %s: this page's section [With the webhook](#with-the-webhook) run as written against the\n", rep.written)
	b.WriteString("whole of Envoy Gateway on the real kubelet, without load ([e2e.md](e2e.md#the-envoy-gateway-page)).\n\n")
	b.WriteString("| scenario | manager | failed / sent | drain (the manager's log) | FailedPreStopHook | note | result |\n")
	b.WriteString("|---|---|---:|---|---|---|---|\n")
	rows, err := peerRowsOf(rep.rows, "envoy-gateway-")
	if err != nil {
		return "", err
	}
	for _, r := range rows {
		hooks, _, _ := strings.Cut(r.hooks, " (")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.name, r.setup, failedOfSent(r.failed, r.sent, r.kinds), r.drain, hooks, r.gone, r.result)
	}
	return b.String(), nil
}

// peerRowsOf is the report's rows of a peer's pod (its own section of REPORT.md) whose scenario begins with
// prefix; none is an error, so that a table never renders empty.
func peerRowsOf(rows []e2eRow, prefix string) ([]e2eRow, error) {
	var out []e2eRow
	for _, r := range rows {
		if r.peer && strings.HasPrefix(r.name, prefix) {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s* row in the report's section of that peer", prefix)
	}
	return out, nil
}

// renderE2ELatest is the run's date and its scenarios' results, for a sentence.
func renderE2ELatest(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	pass, reported, failed := rep.count()
	s := fmt.Sprintf("written %s: %d of %d scenarios passed", rep.written, pass, pass+failed)
	if failed > 0 {
		s += fmt.Sprintf(", %d failed", failed)
	}
	if reported > 0 {
		s += fmt.Sprintf(", %d more reported only", reported)
	}
	if rep.took != "" {
		s += ", " + rep.took + " in all"
	}
	return s, nil
}

// lbMarkedDown is HAProxy's mark-down in a lb-haproxy row's note.
var lbMarkedDown = regexp.MustCompile(`HAProxy marked the pod down (\S+) after the delete \(([^)]*)\)`)

// lbThrough is what each load-balancer row's load went through, by the start of its name (test/e2e/lb_test.go).
var lbThrough = []struct{ prefix, through string }{
	{"lb-haproxy-http-retry-", "HAProxy, HTTP, `retry-on conn-failure`, redispatch"},
	{"lb-haproxy-shutdown-sessions", "HAProxy, TCP, no retries, `on-marked-down shutdown-sessions`"},
	{"lb-haproxy-", "HAProxy, TCP, no retries"},
	{"kubeproxy-", "ClusterIP (kube-proxy)"},
}

// renderLBScenarios is docs/load-balancers.md's table: the report's lb-delete-pod rows.
func renderLBScenarios(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("\n| scenario | through | the manager's flags | failed / sent | p99 | marked down by HAProxy after the delete | drain | delete → pod gone | result |\n")
	b.WriteString("|---|---|---|---:|---:|---|---|---:|---|\n")
	n := 0
	for _, r := range rep.rows {
		if r.action != "lb-delete-pod" {
			continue
		}
		through := ""
		for _, l := range lbThrough {
			if strings.HasPrefix(r.name, l.prefix) {
				through = l.through
				break
			}
		}
		if through == "" {
			return "", fmt.Errorf("the row %s: what its load goes through is not known (lbThrough)", r.name)
		}
		down := "–"
		if m := lbMarkedDown.FindStringSubmatch(r.note); m != nil {
			down = m[1] + " (" + m[2] + ")"
		} else if strings.HasPrefix(r.name, "lb-haproxy-") {
			down = "not marked down"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.name, through, r.setup, failedOfSent(r.failed, r.sent, r.kinds),
			r.p99, down, strings.TrimPrefix(r.drain, "drained in "), r.gone, r.result)
		n++
	}
	if n == 0 {
		return "", fmt.Errorf("no lb-delete-pod rows")
	}
	return b.String(), nil
}

// lbLong is the note test/e2e's lb_test.go writes for a row with long requests.
var lbLong = regexp.MustCompile(`long requests \((\d+) clients, (\S+) each, keep-alive\): (\d+) sent, (\d+) failed; the drain reported (\d+) cut by the client side; HAProxy had (\d+) sessions on the pod when it marked it down`)

// renderLBSessions is docs/load-balancers.md's sentences on the session-killing rows: what the clients lost and
// what the drain reported, behind HAProxy killing sessions and behind the same HAProxy without.
func renderLBSessions(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var parts [2]string
	for i, name := range []string{"lb-haproxy-shutdown-sessions", "lb-haproxy-long-requests"} {
		r, err := rep.row(name)
		if err != nil {
			return "", err
		}
		m := lbLong.FindStringSubmatch(r.note)
		if m == nil {
			return "", fmt.Errorf("the row %s has no note on its long requests", name)
		}
		sessions := m[6] + " sessions"
		if m[6] == "1" {
			sessions = "1 session"
		}
		parts[i] = fmt.Sprintf("lost %s of %s requests (%s of the %s long ones; HAProxy had %s on the pod when it marked it down; %s), and the drain reported %s cut by the client side",
			thousands(r.failed), thousands(r.sent), m[4], m[3], sessions, r.result, m[5])
		if i == 0 {
			parts[i] = fmt.Sprintf("with %s clients sending %s requests through it, the default injection ", m[1], m[2]) + parts[i]
		}
	}
	return fmt.Sprintf("Behind HAProxy killing sessions (%s) %s; behind the same HAProxy without it (%s) it %s",
		"`lb-haproxy-shutdown-sessions`", parts[0], "`lb-haproxy-long-requests`", parts[1]), nil
}

// renderLBSummary is the README's sentence on the load-balancer rows.
func renderLBSummary(text string) (string, error) {
	rep, err := parseE2EReport(text)
	if err != nil {
		return "", err
	}
	var rows [4]e2eRow
	for i, name := range []string{"lb-haproxy-fixed-floor", "lb-haproxy-quiet-period", "kubeproxy-quiet-period-low-floor", "kubeproxy-fixed-floor"} {
		if rows[i], err = rep.row(name); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("a fixed 5 s floor lost %s of %s requests, the quiet period %s of %s; through kube-proxy a 1 s floor "+
		"with the quiet period let the pod go in %s instead of %s", thousands(rows[0].failed), thousands(rows[0].sent),
		thousands(rows[1].failed), thousands(rows[1].sent), rows[2].gone, rows[3].gone), nil
}

var fleetWrittenLine = regexp.MustCompile(`(?m)^Written by ` + "`make e2e-fleet`" + ` \(test/e2e/fleet_test\.go\) on (\d{4}-\d\d-\d\d \d\d:\d\d UTC), (\S+) in all\.$`)

// renderFleetWritten is FLEET.md's date and duration, for a sentence.
func renderFleetWritten(text string) (string, error) {
	m := fleetWrittenLine.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("no line %q", fleetWrittenLine)
	}
	return m[1] + ", " + m[2] + " in all", nil
}

// fleetTables are FLEET.md's table of the fleet's scenarios and of Contour's DaemonSet.
func fleetTables(text string) (fleet, contour mdTable, err error) {
	for _, tb := range mdTables(text) {
		switch {
		case tb.has("node") && tb.has("new traffic after HC failed"):
			fleet = tb
		case tb.has("kube-proxy /healthz"): // the cloud shape's table (fleetContourLB)
		case tb.has("node") && tb.has("rollout"):
			contour = tb
		}
	}
	if fleet.cols == nil || contour.cols == nil {
		return fleet, contour, fmt.Errorf("not both tables (the fleet's scenarios, Contour's DaemonSet)")
	}
	if err := fleet.need("scenario", "node", "requests (sent / failed)", "errors", "new traffic after HC failed", "pass"); err != nil {
		return fleet, contour, err
	}
	err = contour.need("scenario", "requests (sent / failed)", "errors", "rollout", "node", "old pod: deletion began → gone", "drain (manager's log)", "HAProxy down → up (time down)", "pass")
	return fleet, contour, err
}

// fleetSentFailed turns FLEET.md's "sent / failed" into the pages' "failed / sent".
func fleetSentFailed(cell, errs string) (string, int, int, error) {
	var sent, failed int
	if _, err := fmt.Sscanf(cell, "%d / %d", &sent, &failed); err != nil {
		return "", 0, 0, fmt.Errorf("requests %q: %w", cell, err)
	}
	return failedOfSent(failed, sent, errs), sent, failed, nil
}

var fleetScenarioCell = regexp.MustCompile(`^(\S+)(.*) — old pods gone in (\S+)$`)

// renderFleetScenarios is docs/e2e-fleet.md's table of the fleet's scenarios: one row per scenario, the nodes in
// its cells.
func renderFleetScenarios(text string) (string, error) {
	tb, _, err := fleetTables(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("\n| scenario | failed / sent, per node | new traffic after health checks failed, per ended pod | old pods gone after | pass |\n")
	b.WriteString("|---|---|---|---:|---|\n")
	var cur []string
	var reqs, traffic []string
	flush := func() {
		if cur != nil {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cur[0], strings.Join(reqs, "; "), cmp.Or(strings.Join(traffic, "; "), "–"), cur[1], cur[2])
		}
	}
	for _, r := range tb.rows {
		if sc := tb.get(r, "scenario"); sc != "" {
			flush()
			m := fleetScenarioCell.FindStringSubmatch(sc)
			if m == nil {
				return "", fmt.Errorf("scenario cell %q: want %q", sc, fleetScenarioCell)
			}
			cur, reqs, traffic = []string{m[1] + m[2], m[3], tb.get(r, "pass")}, nil, nil
		}
		if cur == nil {
			return "", fmt.Errorf("a row before the first scenario")
		}
		node := strings.TrimPrefix(tb.get(r, "node"), "smgr-e2e-")
		fs, _, _, err := fleetSentFailed(tb.get(r, "requests (sent / failed)"), tb.get(r, "errors"))
		if err != nil {
			return "", err
		}
		reqs = append(reqs, node+": "+fs)
		if nt := tb.get(r, "new traffic after HC failed"); nt != "" && nt != "–" {
			traffic = append(traffic, node+": "+nt)
		}
	}
	flush()
	return b.String(), nil
}

// renderFleetContour is docs/e2e-fleet.md's table of Contour's DaemonSet behind HAProxy: one row per scenario.
func renderFleetContour(text string) (string, error) {
	_, tb, err := fleetTables(text)
	if err != nil {
		return "", err
	}
	return perScenario(tb, "per node: old pod deletion began → gone; drain; HAProxy down → up (time down)", func(r []string) string {
		gone := tb.get(r, "old pod: deletion began → gone")
		if _, after, ok := strings.Cut(gone, ": "); ok {
			gone = after
		}
		drain, _, _ := strings.Cut(tb.get(r, "drain (manager's log)"), "; quiet:")
		return fmt.Sprintf("%s: %s; %s; %s", strings.TrimPrefix(tb.get(r, "node"), "smgr-e2e-"), gone, drain, tb.get(r, "HAProxy down → up (time down)"))
	})
}

// perScenario renders a FLEET.md table of a row per node (the scenario's cells on its first node's row only) as a
// row per scenario: its name, failed / sent, rollout, the nodes' cells (node, one per line, headed nodesHead) and
// pass.
func perScenario(tb mdTable, nodesHead string, node func(r []string) string) (string, error) {
	var b strings.Builder
	b.WriteString("\n| scenario | failed / sent (through HAProxy) | rollout | " + nodesHead + " | pass |\n")
	b.WriteString("|---|---|---|---|---|\n")
	var cur, nodes []string
	flush := func() {
		if cur != nil {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", cur[0], cur[1], cur[2], strings.Join(nodes, "<br>"), cur[3])
		}
	}
	for _, r := range tb.rows {
		if sc := tb.get(r, "scenario"); sc != "" {
			flush()
			fs, _, _, err := fleetSentFailed(tb.get(r, "requests (sent / failed)"), tb.get(r, "errors"))
			if err != nil {
				return "", err
			}
			cur, nodes = []string{sc, fs, tb.get(r, "rollout"), tb.get(r, "pass")}, nil
		}
		if cur == nil {
			return "", fmt.Errorf("a row before the first scenario")
		}
		nodes = append(nodes, node(r))
	}
	flush()
	return b.String(), nil
}

// renderFleetContourSummary is a sentence's figures of Contour's DaemonSet behind HAProxy.
func renderFleetContourSummary(text string) (string, error) {
	_, tb, err := fleetTables(text)
	if err != nil {
		return "", err
	}
	got := map[string]string{}
	for _, r := range tb.rows {
		sc := tb.get(r, "scenario")
		if sc == "" {
			continue
		}
		name, _, _ := strings.Cut(sc, " ")
		_, sent, failed, err := fleetSentFailed(tb.get(r, "requests (sent / failed)"), "")
		if err != nil {
			return "", err
		}
		s := thousands(failed) + " of " + thousands(sent) + " failed"
		if e := tb.get(r, "errors"); failed > 0 && e != "–" {
			s += " (" + e + ")"
		}
		got[name] = s
	}
	var parts []string
	for _, p := range []struct{ name, what string }{
		{"contour-fleet-shipped", "as shipped"}, {"contour-fleet-takeover", "taken over"}, {"contour-fleet-inject", "freshly injected"},
	} {
		s, ok := got[p.name]
		if !ok {
			return "", fmt.Errorf("no scenario %s", p.name)
		}
		parts = append(parts, p.what+" "+s)
	}
	return strings.Join(parts, "; "), nil
}

// renderFleetContourLB is docs/e2e-fleet.md's table of Contour's DaemonSet behind a LoadBalancer Service with
// externalTrafficPolicy Local (FLEET.md's table with the kube-proxy /healthz column): one row per scenario, the
// nodes in a cell.
func renderFleetContourLB(text string) (string, error) {
	var tb mdTable
	for _, t := range mdTables(text) {
		if t.has("kube-proxy /healthz") {
			tb = t
		}
	}
	if tb.cols == nil {
		return "", fmt.Errorf("no table of Contour's DaemonSet behind a LoadBalancer Service (a kube-proxy /healthz column)")
	}
	gone, unready := "old pod: deletion began → gone", "old pod: deletion began → Ready=False → gone"
	if !tb.has(gone) {
		gone = unready
	}
	if err := tb.need("scenario", "requests (sent / failed)", "errors", "rollout", "node", gone, "kube-proxy /healthz", "HAProxy down → up (time down)", "drain (manager's log)", "pass"); err != nil {
		return "", err
	}
	return perScenario(tb, "per node: old pod deletion began → Ready=False → gone; kube-proxy /healthz; HAProxy down → up (time down); drain", func(r []string) string {
		times := tb.get(r, gone)
		if _, after, ok := strings.Cut(times, ": "); ok {
			times = after
		}
		drain, _, _ := strings.Cut(tb.get(r, "drain (manager's log)"), "; quiet:")
		return fmt.Sprintf("%s: %s; %s; %s; %s", strings.TrimPrefix(tb.get(r, "node"), "smgr-e2e-"), times,
			tb.get(r, "kube-proxy /healthz"), tb.get(r, "HAProxy down → up (time down)"), drain)
	})
}

var timelineRequests = regexp.MustCompile(`(?m)^requests sent (\d+), failed (\d+);`)

// renderTimelineRequests is the README's count of the recorded termination's requests.
func renderTimelineRequests(text string) (string, error) {
	m := timelineRequests.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("no line %q", timelineRequests)
	}
	sent, _ := strconv.Atoi(m[1])
	failed, _ := strconv.Atoi(m[2])
	return thousands(failed) + " of " + thousands(sent) + " requests failed", nil
}

// TestEvidenceSummaryLine: the summary line test/e2e/report_test.go writes into REPORT.md (the reports before it
// have none) is the one parseE2EReport reads: the committed report with that line added, as writeReport's format
// gives it, yields the run's time in the sentence, and a line whose counts differ from the rows is refused. So the
// next make e2e needs only -update.
func TestEvidenceSummaryLine(t *testing.T) {
	src := readRepo(t, "test/e2e/report_test.go")
	m := regexp.MustCompile(`"(Scenarios: [^"]*)\\n\\n"`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("test/e2e/report_test.go writes no line \"Scenarios: …\": the pages' e2e-latest blocks read it")
	}
	text := readRepo(t, e2eReportFile)
	text = e2eSummary.ReplaceAllString(text, "") // a report that has it already: its line is added again below
	rep, err := parseE2EReport(text)
	if err != nil {
		t.Fatal(err)
	}
	pass, reported, failed := rep.count()
	i := strings.Index(text, "\n## ")
	if i < 0 {
		t.Fatal("REPORT.md has no section")
	}
	with := func(pass int) string {
		return text[:i] + "\n" + fmt.Sprintf(m[1], pass, reported, failed, len(rep.rows), "19m35s") + "\n" + text[i:]
	}
	got, err := renderE2ELatest(with(pass))
	if err != nil {
		t.Fatalf("REPORT.md with the summary line writeReport writes: %v", err)
	}
	if !strings.HasSuffix(got, ", 19m35s in all") {
		t.Errorf("with the summary line, the sentence is %q: it does not give the run's time", got)
	}
	if _, err := parseE2EReport(with(pass + 1)); err == nil {
		t.Error("a summary line that counts one pass more than the rows was accepted")
	}
}

var benchProduced = regexp.MustCompile(`(?m)^Produced by ` + "`make bench`" + ` on (\d{4}-\d\d-\d\d)T(\d\d:\d\d):\d\dZ: (.*?), shutdown-manager (\S+),`)

// renderBenchWritten is the bench report's date, commit and machine, for a sentence.
func renderBenchWritten(text string) (string, error) {
	m := benchProduced.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("no line %q", benchProduced)
	}
	return fmt.Sprintf("%s %s UTC, at %s; %s", m[1], m[2], m[4], m[3]), nil
}

// renderBenchHeadlines is the bench report's Headlines: its table and its list, as the report has them.
func renderBenchHeadlines(text string) (string, error) {
	i := strings.Index(text, "\n## Headlines\n")
	if i < 0 {
		return "", fmt.Errorf("no section Headlines")
	}
	sec := text[i+1:]
	if j := strings.Index(sec, "\n## "); j >= 0 {
		sec = sec[:j]
	}
	var table, list []string
	for _, l := range strings.Split(sec, "\n") {
		switch {
		case strings.HasPrefix(l, "|"):
			table = append(table, l)
		case strings.HasPrefix(l, "- "):
			list = append(list, l)
		}
	}
	if len(table) < 3 || len(list) == 0 {
		return "", fmt.Errorf("the Headlines section has %d table lines and %d list items", len(table), len(list))
	}
	return "\n" + strings.Join(table, "\n") + "\n\n" + strings.Join(list, "\n") + "\n", nil
}

var (
	sweepProduced = regexp.MustCompile(`(?m)^Produced by .*?, finished (\d{4}-\d\d-\d\d)T(\d\d:\d\d):\d\dZ: .*?; the sweep took ([\d.]+) min\. ` +
		`Load average \(1, 5, 15 min\) before and after: (.*?) on (\d+) CPUs`)
	sweepMeets = regexp.MustCompile(`(?m)^Ours with its defaults meets the goal in \*\*(\d+) of (\d+)\*\* rows\.$`)
)

// renderSweepGoal is the sweep report's verdict on issue 29's goal (rows where ours with its defaults lost
// nothing and let Envoy go within 1 s of the physical limit) and its table per rate, as the report has them.
func renderSweepGoal(text string) (string, error) {
	m := sweepProduced.FindStringSubmatch(text)
	if m == nil {
		return "", fmt.Errorf("no line %q", sweepProduced)
	}
	g := sweepMeets.FindStringSubmatch(text)
	if g == nil {
		return "", fmt.Errorf("no line %q", sweepMeets)
	}
	i := strings.Index(text, "\nPer rate, over its rows")
	if i < 0 {
		return "", fmt.Errorf("no table per rate")
	}
	var table []string
	for _, l := range strings.Split(text[i+1:], "\n")[1:] {
		if strings.HasPrefix(l, "|") {
			table = append(table, l)
		} else if len(table) > 0 {
			break
		}
	}
	if len(table) < 3 {
		return "", fmt.Errorf("the table per rate has %d lines", len(table))
	}
	reach := sweepReach.FindString(text)
	if reach == "" {
		return "", fmt.Errorf("no sentence %q", sweepReach)
	}
	return fmt.Sprintf("\nThe committed sweep (finished %s %s UTC, %s min; load average before and after %s on %s CPUs): "+
		"ours with its defaults meets the goal in **%s of %s** rows. Per rate, over its rows: failed requests, and the "+
		"time over the limit where 0 failed (s):\n\n%s\n\n%s\n", m[1], m[2], m[3], m[4], m[5], g[1], g[2], strings.Join(table, "\n"), reach), nil
}

// sweepReach is the report's sentence on the rows missed that no cautious rule could meet.
var sweepReach = regexp.MustCompile(`In \d+ of the \d+ rows missed, every run asked for [^\n]*\.`)

// renderSweepSummary is the sweep report's summary per policy, for a sentence: for ours (its defaults and its
// variants) the rows at 0 failed and within 1 s of the limit, for the others the rows where requests failed.
func renderSweepSummary(text string) (string, error) {
	const zeroCol, nearCol, failedCol = "rows at 0 failed (every run)", "rows at 0 failed and within 1 s of the limit", "failed requests, all rows"
	for _, tb := range mdTables(text) {
		if tb.need("policy", zeroCol, nearCol, failedCol) != nil {
			continue
		}
		var parts []string
		for _, r := range tb.rows {
			zero, n, ok1 := strings.Cut(tb.get(r, zeroCol), " of ")
			near, _, ok2 := strings.Cut(tb.get(r, nearCol), " of ")
			z, err1 := strconv.Atoi(zero)
			rows, err2 := strconv.Atoi(n)
			if !ok1 || !ok2 || err1 != nil || err2 != nil {
				return "", fmt.Errorf("summary row %q: want \"N of M\" counts", r)
			}
			label := tb.get(r, "policy")
			if strings.HasPrefix(label, "ours") {
				parts = append(parts, fmt.Sprintf("%s: %s failed, %s of %d rows within 1 s of the limit", label, tb.get(r, failedCol), near, rows))
			} else {
				parts = append(parts, fmt.Sprintf("%s: requests failed in %d of %d rows", label, rows-z, rows))
			}
		}
		if len(parts) == 0 {
			return "", fmt.Errorf("the summary per policy has no rows")
		}
		return strings.Join(parts, "; "), nil
	}
	return "", fmt.Errorf("no summary per policy (a table with the columns policy, %q, %q, %q)", zeroCol, nearCol, failedCol)
}

// webhookRun is one run of bench/webhookload, as bench/results/webhook.json holds it.
type webhookRun struct {
	Date     string  `json:"date"`
	Rate     float64 `json:"rate_per_second"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
	RSS      float64 `json:"rss_max_mib"`
	CPU      float64 `json:"cpu_ms_per_admission"`
}

// renderWebhookCommitted is the committed webhook runs' figures: their count, rate and start, admissions and
// failures, and the range of each figure over the runs.
func renderWebhookCommitted(text string) (string, error) {
	var runs []webhookRun
	if err := json.Unmarshal([]byte(text), &runs); err != nil {
		return "", err
	}
	if len(runs) == 0 {
		return "", fmt.Errorf("no runs")
	}
	span := func(f func(r webhookRun) float64) (lo, hi float64) {
		lo, hi = f(runs[0]), f(runs[0])
		for _, r := range runs {
			lo, hi = min(lo, f(r)), max(hi, f(r))
		}
		return lo, hi
	}
	requests, failed := 0, 0
	for _, r := range runs {
		requests += r.Requests
		failed += r.Failed
	}
	cpuLo, cpuHi := span(func(r webhookRun) float64 { return r.CPU })
	p99Lo, p99Hi := span(func(r webhookRun) float64 { return r.P99 })
	_, maxMs := span(func(r webhookRun) float64 { return r.Max })
	_, rss := span(func(r webhookRun) float64 { return r.RSS })
	rateLo, rateHi := span(func(r webhookRun) float64 { return r.Rate })
	if rateLo != rateHi {
		return "", fmt.Errorf("runs at different rates (%g to %g a second)", rateLo, rateHi)
	}
	day, clock, ok := strings.Cut(runs[0].Date, "T")
	if !ok || len(clock) < 5 {
		return "", fmt.Errorf("date %q", runs[0].Date)
	}
	return fmt.Sprintf("%d runs at %g admissions/s from %s %s UTC: %s admissions, %d failed; CPU %.2f–%.2f ms per "+
		"admission; p99 %.1f–%.1f ms, max %.1f ms; at most %.0f MiB RSS", len(runs), rateLo, day, clock[:5],
		thousands(requests), failed, cpuLo, cpuHi, p99Lo, p99Hi, maxMs, rss), nil
}

// timelineEvent is the time of the first event of docs/timeline/events.csv whose name starts with prefix.
func timelineEvent(text, prefix string) (float64, error) {
	for _, l := range strings.Split(text, "\n")[1:] {
		at, name, ok := strings.Cut(l, ",")
		if !ok || !strings.HasPrefix(strings.Trim(name, `"`), prefix) {
			continue
		}
		return strconv.ParseFloat(at, 64)
	}
	return 0, fmt.Errorf("no event %q", prefix)
}

// renderTimelineWaited is when the recorded drain's wait for the work in flight ended, for the README's sentence.
func renderTimelineWaited(text string) (string, error) {
	at, err := timelineEvent(text, "waiting ended")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%.1f s", at), nil
}

// renderTimelineExit is how long Envoy took to exit after the hook returned (kubelet's SIGTERM).
func renderTimelineExit(text string) (string, error) {
	hook, err := timelineEvent(text, "hook returned")
	if err != nil {
		return "", err
	}
	exit, err := timelineEvent(text, "Envoy exited")
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%.0f ms", (exit-hook)*1000), nil
}

// TestSweepEvidence: the sweep's blocks read what bench/plot.py writes (its sentences and tables, by their
// wording), and a report without them is an error rather than an empty block.
func TestSweepEvidence(t *testing.T) {
	plot := readRepo(t, "bench/plot.py")
	for _, s := range []string{"Ours with its defaults meets the goal in **{meets} of {rows_goal}** rows.",
		`"Per rate, over its rows:`, `"rows at 0 failed (every run)"`, `"failed requests, all rows"`,
		`f"rows at 0 failed and within {WITHIN:g} s of the limit"`, "WITHIN = 1.0", "; the sweep took ", "before and after: ",
		"rows missed, every run asked for a silence"} {
		if !strings.Contains(plot, s) {
			t.Errorf("bench/plot.py no longer writes %s: the blocks sweep-goal and sweep-summary read it", s)
		}
	}
	text := readRepo(t, sweepReportFile)
	for name, render := range map[string]func(string) (string, error){"sweep-goal": renderSweepGoal, "sweep-summary": renderSweepSummary} {
		if _, err := render(text); err != nil {
			t.Errorf("%s from %s: %v", name, sweepReportFile, err)
		}
		if got, err := render("# Propagation sweep\n"); err == nil {
			t.Errorf("%s from a report without its figures: %q, want an error", name, got)
		}
	}
}
