package docs

import (
	"slices"
	"strings"
)

// isExcerpt reports whether block (a fenced block's text) is a run of consecutive lines of one of sources,
// shifted left as a whole: an excerpt from deep inside a manifest may start at the margin.
func isExcerpt(block string, sources [][]string) bool {
	want := dedent(strings.Split(strings.TrimSuffix(block, "\n"), "\n"))
	for _, lines := range sources {
		for i := 0; i+len(want) <= len(lines); i++ {
			if slices.Equal(dedent(lines[i:i+len(want)]), want) {
				return true
			}
		}
	}
	return false
}

// dedent removes the indentation all non-blank lines share.
func dedent(lines []string) []string {
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		out[i] = strings.TrimRight(l, " ")
	}
	return out
}
