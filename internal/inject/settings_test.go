package inject

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/settings.md's generated tables")

// settingsPage is the page that documents the settings; its tables are generated from DrainSettings and
// NotCarried (TestSettingsPage, -update rewrites them).
var settingsPage = filepath.Join("..", "..", "docs", "settings.md")

// settingsTables are the page's generated parts: a table between a begin and an end marker each.
func settingsTables() map[string]string {
	var carried strings.Builder
	carried.WriteString("| `inject`, `webhook`, `policy` flag; annotation `" + Prefix + "…` | flag of `drain`, `serve`, `run` | chart value | values | example |\n|---|---|---|---|---|\n")
	for _, d := range DrainSettings {
		values := string(d.Kind)
		switch {
		case d.Syntax != "":
			values = d.Syntax
		case d.Values != nil:
			values = "`" + strings.Join(d.Values, "`, `") + "`"
		case d.Kind == KindDuration && d.Positive:
			values = "a positive duration"
		case d.Kind == KindDuration:
			values = "a duration"
		case d.Kind == KindCount:
			values = "a whole number >= 0"
		case d.Kind == KindList:
			values = "regular expressions (flag repeated; annotation one per line)"
		}
		fmt.Fprintf(&carried, "| `%s` | `--%s` | `inject.%s` | %s | `%s` |\n", d.Name, d.DrainFlag(), d.ChartValue(), values, strings.ReplaceAll(d.Example, "|", `\|`))
	}
	var not strings.Builder
	not.WriteString("| flag of `drain`, `serve`, `run` | why inject does not carry it |\n|---|---|\n")
	for _, n := range NotCarried {
		fmt.Fprintf(&not, "| `--%s` | %s |\n", n.Flag, n.Why)
	}
	return map[string]string{"carried": carried.String(), "not-carried": not.String()}
}

// TestSettingsPage: docs/settings.md's tables are DrainSettings and NotCarried (go test ./internal/inject -run
// TestSettingsPage -update rewrites them).
func TestSettingsPage(t *testing.T) {
	raw, err := os.ReadFile(settingsPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(raw)
	for name, table := range settingsTables() {
		begin, end := "<!-- table "+name+": generated from internal/inject/settings.go -->\n", "<!-- end of table "+name+" -->"
		b, e := strings.Index(page, begin), strings.Index(page, end)
		if b < 0 || e < b {
			t.Errorf("%s has no table between %q and %q", settingsPage, strings.TrimSpace(begin), end)
			continue
		}
		b += len(begin)
		if got := page[b:e]; got != table {
			if *update {
				page = page[:b] + table + page[e:]
				continue
			}
			t.Errorf("%s's table %s is not the code's (go test ./internal/inject -run TestSettingsPage -update rewrites it):\ngot\n%s\nwant\n%s", settingsPage, name, got, table)
		}
	}
	if *update && page != string(raw) {
		if err := os.WriteFile(settingsPage, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
