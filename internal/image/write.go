package image

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// WriteArchive writes img to path as a docker-archive tar (the format of `docker save`) whose RepoTags name tag,
// for `docker load` and `ctr images import`. Runtimes normalise a short tag: containerd stores
// `shutdown-manager:v1` as docker.io/library/shutdown-manager:v1.
func WriteArchive(path, tag string, img v1.Image) error {
	t, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("parsing the image name %q: %w", tag, err)
	}
	if err := tarball.WriteToFile(path, t, img); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// WriteLayout writes idx as an OCI image layout in dir, replacing what was there. The layout's index.json
// points at idx with the annotation org.opencontainers.image.ref.name = refName (the tag that
// `skopeo copy oci:DIR:REF` and `ctr images import` name it by). Every file is made 0644 and every directory
// 0755: go-containerregistry writes blobs through os.CreateTemp (0600), which would leave them readable only
// by the user who ran make image (a registry or a copy tool run as another user could not read them).
func WriteLayout(dir, refName string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the old layout: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": refName,
	})); err != nil {
		return fmt.Errorf("writing the index into %s: %w", dir, err)
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return os.Chmod(path, 0o755)
		default:
			return os.Chmod(path, 0o644)
		}
	})
	if err != nil {
		return fmt.Errorf("making the layout %s readable: %w", dir, err)
	}
	return nil
}

// ReadLayout returns the image index WriteLayout wrote into dir (its index.json holds that one index), for
// pushing the very image a release verified rather than a rebuild of it.
func ReadLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the layout %s: %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the layout %s: %w", dir, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading the layout %s: %w", dir, err)
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		return nil, fmt.Errorf("the layout %s holds %d entries, want the one image index make image or make release writes", dir, len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("reading the index in %s: %w", dir, err)
	}
	return idx, nil
}

// Push pushes idx (the index, its images and their blobs) to ref, authenticating with kc
// (authn.DefaultKeychain reads the user's docker config and credential helpers). It returns the pushed
// reference by digest.
func Push(ctx context.Context, ref string, idx v1.ImageIndex, kc authn.Keychain, opts ...remote.Option) (name.Digest, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, fmt.Errorf("parsing the image name %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}, opts...)
	if err := remote.WriteIndex(r, idx, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", ref, err)
	}
	h, err := idx.Digest()
	if err != nil {
		return name.Digest{}, fmt.Errorf("hashing the index: %w", err)
	}
	return r.Context().Digest(h.String()), nil
}
