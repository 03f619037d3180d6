// Package doctable reads and writes the Markdown documents the tests check: it writes one column of a table (the
// tests that generate docs/compatibility.md from what the real parts did use it to write, with -update, or check
// their column), and reads a page's sections and code blocks (test/docs checks them; the e2e runs a page's
// commands).
package doctable

import (
	"fmt"
	"slices"
	"strings"
)

// SetColumn writes column's cells into the Markdown table of doc whose header row starts with header (e.g.
// "| feature |"), one cell per row named by the row's first cell, adding the column when the table lacks it.
// A cell for a row the table lacks is an error: rows are written by hand, columns by the tests.
func SetColumn(doc, header, column string, cells map[string]string) (string, error) {
	lines := strings.Split(doc, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, header) })
	if start < 0 || start+1 >= len(lines) {
		return "", fmt.Errorf("no table whose header starts with %q", header)
	}
	head := split(lines[start])
	col := slices.Index(head, column)
	if col < 0 {
		head = append(head, column)
		col = len(head) - 1
		lines[start] = join(head)
		lines[start+1] = join(slices.Repeat([]string{"---"}, len(head)))
	}
	seen := map[string]bool{}
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		row := split(lines[i])
		for len(row) < len(head) {
			row = append(row, "")
		}
		if v, ok := cells[row[0]]; ok {
			row[col], seen[row[0]] = v, true
		}
		lines[i] = join(row)
	}
	for name := range cells {
		if !seen[name] {
			return "", fmt.Errorf("the table %q has no row %q: add it", header, name)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// Columns returns the header cells of the table of doc whose header row starts with header.
func Columns(doc, header string) ([]string, error) {
	lines := strings.Split(doc, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, header) })
	if start < 0 {
		return nil, fmt.Errorf("no table whose header starts with %q", header)
	}
	return split(lines[start]), nil
}

// KeepColumns removes from that table every column whose name keep refuses (a version no longer pinned), cells
// and all; the first column, which names the rows, always stays.
func KeepColumns(doc, header string, keep func(column string) bool) (string, error) {
	lines := strings.Split(doc, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, header) })
	if start < 0 || start+1 >= len(lines) {
		return "", fmt.Errorf("no table whose header starts with %q", header)
	}
	head := split(lines[start])
	var kept []int
	for i, c := range head {
		if i == 0 || keep(c) {
			kept = append(kept, i)
		}
	}
	if len(kept) == len(head) {
		return doc, nil
	}
	pick := func(row []string) []string {
		out := make([]string, 0, len(kept))
		for _, i := range kept {
			if i < len(row) {
				out = append(out, row[i])
			} else {
				out = append(out, "")
			}
		}
		return out
	}
	lines[start] = join(pick(head))
	lines[start+1] = join(slices.Repeat([]string{"---"}, len(kept)))
	for i := start + 2; i < len(lines) && strings.HasPrefix(lines[i], "|"); i++ {
		lines[i] = join(pick(split(lines[i])))
	}
	return strings.Join(lines, "\n"), nil
}

func split(l string) []string {
	f := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

func join(cells []string) string { return "| " + strings.Join(cells, " | ") + " |" }
