package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// installName is the file install writes in DIR: the same name as in the image, so a copy in an emptyDir
// mounted at /opt/shutdown-manager and an image volume mounted there are both
// /opt/shutdown-manager/shutdown-manager.
const installName = "shutdown-manager"

// Install is the install command, with --kubectl-plugin when plugin is true (the full CLI: the pod binary
// has no kubectl plugin to install).
func Install(plugin bool) Command {
	return Command{"install", "copy this binary to DIR/shutdown-manager, mode 0555 (the image has no shell or cp: hook mode's init container)",
		func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
			return runInstall(ctx, args, plugin, stdout, stderr)
		}}
}

// runInstall copies the running binary into DIR as DIR/shutdown-manager with mode 0555, for hook mode's init
// container: the image is FROM scratch, with no shell and no cp, so the binary copies itself. Mode 0555
// because Envoy's container, which executes the copy, may run as another UID.
//
// The copy is atomic (a temporary file in DIR, synced, made 0555, renamed over the target), so a container
// never sees a partial binary, and repeating it (a restarted init container) is harmless. It writes nothing
// outside DIR: it works as non-root with a read-only root filesystem when DIR is a writable volume.
func runInstall(ctx context.Context, args []string, withPlugin bool, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	var lf LogFlags
	lf.Register(fs)
	plugin := new(bool)
	if withPlugin {
		plugin = fs.Bool("kubectl-plugin", false, "install the kubectl plugin instead: DIR/"+PluginName+" (mode 0555), for a DIR on the PATH; kubectl then runs it as kubectl shutdown-manager")
	}
	rest, err := ParseArgs(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return Usagef("want one argument, the directory to install into (got %d)", len(rest))
	}
	dir := rest[0]
	log, closeLog, err := lf.Logger(stdout, stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	src, err := openSelf()
	if err != nil {
		return err
	}
	defer src.Close()
	name := installName
	if *plugin {
		name = PluginName
	}
	dst := filepath.Join(dir, name)
	n, err := installFile(ctx, src, dst)
	if err != nil {
		return fmt.Errorf("installing into %s: %w", dir, err)
	}
	log.Info("installed", "path", dst, "bytes", n, "mode", "0555", "version", Version)
	return nil
}

// openSelf opens the running binary: /proc/self/exe, which stays valid even if the file was replaced since
// the process started, else the path os.Executable reports.
func openSelf() (*os.File, error) {
	if f, err := os.Open("/proc/self/exe"); err == nil {
		return f, nil
	}
	path, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening this binary: %w", err)
	}
	return f, nil
}

// installFile writes src to dst atomically with mode 0555 and returns the bytes written. The temporary file
// is in dst's directory, so the rename never crosses file systems; it is removed on any failure.
func installFile(ctx context.Context, src io.Reader, dst string) (n int64, err error) {
	dir := filepath.Dir(dst)
	if fi, err := os.Stat(dir); err != nil {
		return 0, err
	} else if !fi.IsDir() {
		return 0, fmt.Errorf("%s is not a directory", dir)
	}
	tmp, err := os.CreateTemp(dir, "."+installName+".tmp-*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if n, err = io.Copy(tmp, src); err != nil {
		return 0, fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err = tmp.Chmod(0o555); err != nil { // on the open file: the umask does not apply
		return 0, err
	}
	if err = tmp.Sync(); err != nil {
		return 0, fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return 0, fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err = ctx.Err(); err != nil {
		return 0, err
	}
	if err = os.Rename(tmp.Name(), dst); err != nil {
		return 0, err
	}
	// The rename is durable once the directory is synced; a failure here leaves a complete binary.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return n, nil
}
