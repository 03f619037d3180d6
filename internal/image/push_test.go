package image

import (
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPush pushes the real multi-arch index to go-containerregistry's in-process registry, as
// `make image-push` does, pulls it back by tag and checks both platforms: config and the binary's layer.
func TestPush(t *testing.T) {
	bins, idx := realIndex(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/team/shutdown-manager:" + testMetadata.Version

	pushed, err := Push(t.Context(), ref, idx, authn.DefaultKeychain)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if pushed.DigestStr() != want.String() || pushed.Context().Name() != host+"/team/shutdown-manager" {
		t.Errorf("Push() = %s, want %s/team/shutdown-manager@%s", pushed, host, want)
	}

	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s back: %v", ref, err)
	}
	if got, _ := pulled.Digest(); got != want {
		t.Errorf("pulled index %s, pushed %s", got, want)
	}
	for _, bin := range bins {
		t.Run(bin.Arch, func(t *testing.T) {
			img, err := remote.Image(tag, remote.WithContext(t.Context()),
				remote.WithPlatform(v1.Platform{OS: "linux", Architecture: bin.Arch}))
			if err != nil {
				t.Fatalf("pulling linux/%s: %v", bin.Arch, err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, cf, bin.Arch, testMetadata)
			checkImageFiles(t, img, testMetadata, bin.Data)
		})
	}

	if _, err := Push(t.Context(), host+"/Bad Name", idx, authn.DefaultKeychain); err == nil || !strings.Contains(err.Error(), `"`+host+`/Bad Name"`) {
		t.Errorf("Push(bad name) = %v, want an error naming it", err)
	}
}

// TestPushFromLayout: the index read back from the OCI layout make release writes is the one written, and pushes
// with the same digest (what docs/release.md has a team push to its registry).
func TestPushFromLayout(t *testing.T) {
	idx, err := NewIndex(testMetadata, fakeBinaries())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "image-oci")
	if err := WriteLayout(dir, "shutdown-manager:"+testMetadata.Version, idx); err != nil {
		t.Fatal(err)
	}
	read, err := ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := idx.Digest()
	if got, _ := read.Digest(); got != want {
		t.Fatalf("ReadLayout gave index %s, WriteLayout wrote %s", got, want)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/shutdown-manager:" + testMetadata.Version
	pushed, err := Push(t.Context(), ref, read, authn.DefaultKeychain)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.DigestStr() != want.String() {
		t.Errorf("pushed %s, want the layout's index %s", pushed, want)
	}
	pulled, err := remote.Index(pushed, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatalf("pulling %s back: %v", pushed, err)
	}
	if im, err := pulled.IndexManifest(); err != nil || len(im.Manifests) != len(fakeBinaries()) {
		t.Errorf("pulled index: %v (err %v), want one manifest per arch", im, err)
	}

	if _, err := ReadLayout(t.TempDir()); err == nil {
		t.Error("ReadLayout of an empty directory gave no error")
	}
}
