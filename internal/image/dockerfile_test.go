package image

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDockerfile checks that the Dockerfile (which cannot be built without a Docker daemon) makes the image
// the Go build makes: FROM scratch, the binary at BinaryPath with mode 0555 and owner 0:0 as the entrypoint,
// User, the labels, and the binary built as Compile builds it.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(data), "\\\n", " ") // join continued lines
	var final []string                                    // the instructions of the last stage
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "FROM ") {
			final = nil
		}
		final = append(final, strings.Join(strings.Fields(line), " "))
	}
	if len(final) == 0 || final[0] != "FROM scratch" {
		t.Fatalf("last stage starts with %q, want FROM scratch", final[:min(1, len(final))])
	}
	has := func(prefix string) string {
		for _, in := range final {
			if strings.HasPrefix(in, prefix) {
				return in
			}
		}
		t.Errorf("the last stage has no %q instruction", prefix)
		return ""
	}
	if got := has("USER "); got != "USER "+User {
		t.Errorf("%q, want USER %s", got, User)
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(has("ENTRYPOINT "), "ENTRYPOINT ")), &entrypoint); err != nil ||
		!slices.Equal(entrypoint, []string{BinaryPath}) {
		t.Errorf("ENTRYPOINT = %q (%v), want [%q] in exec form", entrypoint, err, BinaryPath)
	}
	copyLine := has("COPY ")
	for _, want := range []string{"--chmod=0555", "--chown=0:0", " " + BinaryPath} {
		if !strings.Contains(copyLine, want) {
			t.Errorf("%q lacks %q", copyLine, want)
		}
	}
	label := has("LABEL ")
	for _, key := range []string{LabelVersion, LabelSource + "=" + Source, LabelRevision} {
		if !strings.Contains(label, key) {
			t.Errorf("%q lacks %q", label, key)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^(COPY|ADD|RUN) `).FindAllString(strings.Join(final, "\n"), -1)); n != 1 {
		t.Errorf("the last stage has %d COPY/ADD/RUN instructions, want 1: one file, nothing else", n)
	}
	build := regexp.MustCompile(`RUN .*go build .*`).FindString(text)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", `-ldflags "` + LDFlags("${VERSION}", "${REVISION}") + `"`,
		strings.Join(PodBuildFlags, " "), MainPackage} {
		if !strings.Contains(build, want) {
			t.Errorf("the Dockerfile's go build %q lacks %q", build, want)
		}
	}
}

// TestMakefileBuildsAsCompile: `make build` and the image's binary are built with the same flags.
func TestMakefileBuildsAsCompile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^LDFLAGS\s*:?=\s*(.*)$`).FindSubmatch(data)
	if m == nil {
		t.Fatal("the Makefile defines no LDFLAGS")
	}
	if got, want := strings.TrimSpace(string(m[1])), LDFlags("$(VERSION)", "$(COMMIT)"); got != want {
		t.Errorf("Makefile LDFLAGS = %q, image.LDFlags = %q", got, want)
	}
	if !regexp.MustCompile(`(?m)^build:\n\tCGO_ENABLED=0 \$\(GO\) build -trimpath -ldflags '\$\(LDFLAGS\)'`).Match(data) {
		t.Error("make build no longer builds with CGO_ENABLED=0 -trimpath -ldflags '$(LDFLAGS)' as Compile does")
	}
	m = regexp.MustCompile(`(?m)^POD_BUILDFLAGS\s*:?=\s*(.*)$`).FindSubmatch(data)
	if m == nil || strings.TrimSpace(string(m[1])) != strings.Join(PodBuildFlags, " ") {
		t.Errorf("Makefile POD_BUILDFLAGS = %q, image.PodBuildFlags = %q", m, PodBuildFlags)
	}
	if !strings.Contains(string(data), "-ldflags '$(LDFLAGS)' $(POD_BUILDFLAGS) -o bin/shutdown-manager-pod "+MainPackage) {
		t.Error("make build no longer builds the pod binary with $(POD_BUILDFLAGS), as Compile does")
	}
}

// TestREADMEDescribesImage: the image's section of docs/install.md (moved there from the README) states the facts
// the tests check on the image.
func TestREADMEDescribesImage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(data)), " ")
	for _, want := range []string{
		"`" + BinaryPath + "` (mode 0555, owner 0:0), and nothing else",
		"Entrypoint `" + BinaryPath + "`, user " + User,
		"labels `org.opencontainers.image.{version,source,revision,created}`",
		"`docker.io/library/shutdown-manager:VERSION`",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("docs/install.md does not say %q", want)
		}
	}
}
