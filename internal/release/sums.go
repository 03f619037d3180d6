package release

import (
	"bytes"
	"fmt"
	"io/fs"
	"strings"
)

// SumsFile is the checksum file's name in dist/.
const SumsFile = "SHA256SUMS"

// Checksums returns the SHA256SUMS file of every regular file under fsys (dist/), in the format
// `sha256sum -c` reads: "<hex>  <path>" with the path relative to fsys's root and '/'-separated, in lexical
// order (fs.WalkDir's), one line each. A SumsFile already at the root is left out. Anything but a regular file
// or a directory (a symlink, a device) is an error: dist/ holds files only.
func Checksums(fsys fs.FS) ([]byte, error) {
	var buf bytes.Buffer
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", path)
		case path == SumsFile:
			return nil
		case strings.ContainsAny(path, "\n\\"):
			return fmt.Errorf("%q: a newline or backslash in a path would need sha256sum's escaped format", path)
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&buf, "%s  %s\n", SHA256Hex(data), path)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("computing the checksums: %w", err)
	}
	return buf.Bytes(), nil
}
