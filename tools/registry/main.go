// Command registry is distribution's registry with what make e2e configures (test/e2e/registry.go): filesystem
// storage and htpasswd authentication. distribution's own cmd/registry links every cloud storage driver too (S3,
// GCS, Azure) and took about 15 minutes to build cold on 2 busy CPUs; the registry itself is the same code, from
// the module version this go.mod requires. scripts/registry-binary.sh builds it.
package main

import (
	"os"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

func main() {
	if err := registry.RootCmd.Execute(); err != nil {
		os.Exit(1)
	}
}
