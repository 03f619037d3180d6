// Package envoyproc finds Envoy's process among the processes this one can see (its PID namespace), so
// that a preStop exec hook inside Envoy's container can write its log to Envoy's stdout (what `kubectl
// logs` shows) and read Envoy's command line (to find its bootstrap and admin address).
//
// It reads /proc only: the process's name (comm) and argv. It never signals or traces anything.
package envoyproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
)

// Process is one Envoy process as /proc shows it.
type Process struct {
	PID  int
	Args []string // argv; Args[0] as Envoy was started
	proc string   // the /proc root it was found under
}

// ErrNotFound is returned when no Envoy process is visible.
var ErrNotFound = errors.New("no envoy process found")

// envoyName matches an Envoy executable's name: "envoy", or a versioned copy such as "envoy-1.40.0".
var envoyName = regexp.MustCompile(`^envoy([-.][0-9A-Za-z.\-_]*)?$`)

// Find returns Envoy's process under procRoot (normally "/proc"): a process whose name (comm) or argv[0]'s
// base name is envoy. With several, PID 1 wins (Envoy as the container's main process), else the lowest PID
// (the oldest; a hot restart's second Envoy comes after). Processes that vanish while being read are
// skipped, and so are zombies (exited, not yet reaped: /proc/PID/stat state Z or X), which are no running
// Envoy; a /proc that cannot be listed is an error.
func Find(procRoot string) (Process, error) {
	found, err := All(procRoot)
	if err != nil {
		return Process{}, err
	}
	return found[0], nil
}

// All returns every live Envoy process under procRoot, in Find's order (PID 1 first, then by PID); ErrNotFound
// when there is none. A hot restart shows two; a host's /proc shows every container's.
func All(procRoot string) ([]Process, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	self := os.Getpid()
	var found []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 || pid == self {
			continue
		}
		dir := filepath.Join(procRoot, e.Name())
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		args := splitCmdline(cmdline)
		if !IsEnvoy(string(bytes.TrimSpace(comm)), args) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join(dir, "stat")); err == nil && exited(stat) {
			continue
		}
		found = append(found, Process{PID: pid, Args: args, proc: procRoot})
	}
	if len(found) == 0 {
		return nil, ErrNotFound
	}
	slices.SortFunc(found, func(a, b Process) int {
		switch {
		case a.PID == 1:
			return -1
		case b.PID == 1:
			return 1
		}
		return a.PID - b.PID
	})
	return found, nil
}

// IsEnvoy reports whether a process with this comm and argv is Envoy. It is pure.
func IsEnvoy(comm string, args []string) bool {
	if envoyName.MatchString(comm) {
		return true
	}
	return len(args) > 0 && envoyName.MatchString(path.Base(args[0]))
}

// exited reports whether /proc/PID/stat ("12 (envoy) Z 1 …") says the process has exited: state Z (a zombie)
// or X (dead). The state follows the last ')', since the name in parentheses may hold anything.
func exited(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(stat[i+1:])
	return len(f) > 0 && (string(f[0]) == "Z" || string(f[0]) == "X")
}

// splitCmdline splits /proc/PID/cmdline (NUL-separated, NUL-terminated) into argv.
func splitCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil
	}
	parts := bytes.Split(b, []byte{0})
	args := make([]string, len(parts))
	for i, p := range parts {
		args[i] = string(p)
	}
	return args
}

// OpenStdout opens the process's standard output for appending, as /proc/PID/fd/1. It fails when this
// process may not (another user's process), or when that stdout cannot be opened by path (a socket).
func (p Process) OpenStdout() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(p.proc, strconv.Itoa(p.PID), "fd", "1"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the stdout of envoy (pid %d): %w", p.PID, err)
	}
	return f, nil
}

// ReadFile reads a file as Envoy sees it: an absolute path through its root (/proc/PID/root, so a process
// in another container of a pod with a shared process namespace reads Envoy's own file), a relative one
// from its working directory; and, if that is refused, the same path in this process's view.
func (p Process) ReadFile(name string) ([]byte, error) {
	base := filepath.Join(p.proc, strconv.Itoa(p.PID))
	via := filepath.Join(base, "root", name)
	if !filepath.IsAbs(name) {
		via = filepath.Join(base, "cwd", name)
	}
	data, err := os.ReadFile(via)
	if err == nil {
		return data, nil
	}
	if data, err2 := os.ReadFile(name); err2 == nil && filepath.IsAbs(name) {
		return data, nil
	}
	return nil, fmt.Errorf("reading %s of envoy (pid %d): %w", name, p.PID, err)
}
