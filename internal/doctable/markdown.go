package doctable

import (
	"fmt"
	"regexp"
	"strings"
)

// Section returns the text of the Markdown page from the line that is heading ("## Going back") to the next
// heading of the same or a higher level.
func Section(page, heading string) (string, error) {
	i := strings.Index(page, "\n"+heading+"\n")
	if i < 0 {
		return "", fmt.Errorf("no heading %q", heading)
	}
	level := strings.Index(heading, " ")
	rest := page[i+len(heading)+2:]
	for _, l := range headingLine.FindAllStringIndex(rest, -1) {
		if l[1]-l[0]-1 <= level {
			return rest[:l[0]], nil
		}
	}
	return rest, nil
}

var headingLine = regexp.MustCompile(`(?m)^#{1,6} `)

// Blocks returns the contents of the page's fenced blocks of language lang (```sh … ```).
func Blocks(page, lang string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(page, -1) {
		out = append(out, m[1])
	}
	return out
}
