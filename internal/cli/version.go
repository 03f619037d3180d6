package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// BuildInfo is what `version` reports: the release (a git tag, or dev), the commit it was built from, and the Go
// toolchain and platform of the binary. `version -o json` writes it with these keys.
type BuildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildInfo is this binary's BuildInfo. The commit is the stamped Commit, else the revision Go recorded from git
// (`go build` in a checkout without -buildvcs=false; "-dirty" when the tree had changes), else "unknown".
func buildInfo() BuildInfo {
	commit := Commit
	if commit == "" {
		commit = "unknown"
		if bi, ok := debug.ReadBuildInfo(); ok {
			commit = vcsRevision(bi.Settings)
		}
	}
	return BuildInfo{Version: Version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
}

// vcsRevision is the revision in Go's build settings, marked -dirty when vcs.modified says so; "unknown" without one.
func vcsRevision(settings []debug.BuildSetting) string {
	var rev, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "":
		return "unknown"
	case modified == "true":
		return rev + "-dirty"
	}
	return rev
}

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	short := fs.Bool("short", false, "print the version alone, without the program's name (for scripts)")
	output := OutputFlag(fs)
	if err := Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := CheckOutput(fs, *output); err != nil {
		return err
	}
	bi := buildInfo()
	switch {
	case *output == "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(bi); err != nil {
			return fmt.Errorf("writing the version: %w", err)
		}
	case *short:
		fmt.Fprintln(stdout, bi.Version)
	default:
		fmt.Fprintf(stdout, "shutdown-manager %s (commit %s, %s, %s)\n", bi.Version, bi.Commit, bi.Go, bi.Platform)
	}
	return nil
}
