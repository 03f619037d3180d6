package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOutputs(t *testing.T) {
	oldVersion, oldCommit := Version, Commit
	t.Cleanup(func() { Version, Commit = oldVersion, oldCommit })
	Version, Commit = "v0.1.0", "0123456789abcdef0123456789abcdef01234567"

	run := func(args ...string) (string, int) {
		var out bytes.Buffer
		code := Run(context.Background(), args, nil, &out, io.Discard)
		return out.String(), code
	}
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if got, _ := run("version"); got != "shutdown-manager v0.1.0 (commit "+Commit+", "+runtime.Version()+", "+platform+")\n" {
		t.Errorf("version printed %q", got)
	}
	if got, _ := run("--version"); !strings.HasPrefix(got, "shutdown-manager v0.1.0 (commit ") {
		t.Errorf("--version printed %q", got)
	}
	if got, _ := run("version", "--short"); got != "v0.1.0\n" {
		t.Errorf("version --short printed %q", got)
	}
	got, code := run("version", "-o", "json")
	if code != ExitOK {
		t.Fatalf("version -o json exited %d", code)
	}
	var bi map[string]string
	if err := json.Unmarshal([]byte(got), &bi); err != nil {
		t.Fatalf("version -o json printed %q: %v", got, err)
	}
	want := map[string]string{"version": "v0.1.0", "commit": Commit, "go": runtime.Version(), "platform": platform}
	if len(bi) != len(want) {
		t.Errorf("version -o json keys %v, want %v", bi, want)
	}
	for k, v := range want {
		if bi[k] != v {
			t.Errorf("version -o json %s = %q, want %q", k, bi[k], v)
		}
	}
	if _, code := run("version", "-o", "yaml"); code != ExitUsage {
		t.Errorf("version -o yaml exited %d, want %d", code, ExitUsage)
	}
}

func TestVCSRevision(t *testing.T) {
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc"}}, "abc-dirty"},
		{[]debug.BuildSetting{{Key: "-trimpath", Value: "true"}}, "unknown"},
	} {
		if got := vcsRevision(tc.settings); got != tc.want {
			t.Errorf("vcsRevision(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}
