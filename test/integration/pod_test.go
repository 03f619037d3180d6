package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// A pod without kubelet: each container's process runs with only that container's mounts, the way a container
// runtime gives them, and the pod's network (here the host's loopback, shared by all of them as a pod's
// containers share one). This is what makes a test of an injected pod say whether the command as written reaches
// what it names: a socket in a volume the container does not mount is not there.
//
// A container is `unshare --mount --propagation private --pid --fork` running a shell script that builds a fresh
// root (a tmpfs) holding only: the container's volumeMounts at their mountPaths (a host directory per volume, the
// emptyDir; subPath a directory inside it; readOnly a read-only bind), the image's files the test names (the
// binary at the path the image has it, the shared libraries the image would carry), /proc of the container's own
// PID namespace, /dev/{null,zero,random,urandom}, /dev/shm and /tmp; the root is read-only when
// readOnlyRootFilesystem. It then chroots there as the container's user (runAsUser/runAsGroup, the container's
// over the pod's) and execs the container's command and args exactly, $(VAR) expanded from its env as kubelet
// does. An exec action (a preStop hook) runs with nsenter in the container's mount and PID namespaces and root.
//
// Needs root (mount, chroot, namespaces) and util-linux's unshare and nsenter.

// testPod is a pod spec run by the harness: the volumes' host directories and the running containers.
type testPod struct {
	t       *testing.T
	dir     string            // host directory holding the volumes and logs
	spec    *corev1.PodSpec   // the pod as injected
	env     map[string]string // the downward API's values: metadata.name, metadata.namespace, metadata.uid
	volumes map[string]string // volume name -> host directory
	// images: container name -> files of its image, path in the container -> host path (bound read-only).
	images map[string]map[string]string
}

// newTestPod makes the pod's volumes: a host directory for each (every kind is an emptyDir here; the test
// fills a configMap's or secret's files itself), world-writable like an emptyDir.
func newTestPod(t *testing.T, dir string, spec *corev1.PodSpec) *testPod {
	t.Helper()
	p := &testPod{t: t, dir: dir, spec: spec, volumes: map[string]string{}, images: map[string]map[string]string{},
		env: map[string]string{"metadata.name": "envoy-0", "metadata.namespace": "edge", "metadata.uid": "5e1f-uid"}}
	for _, v := range spec.Volumes {
		d := filepath.Join(dir, "vol", v.Name)
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		p.volumes[v.Name] = d
	}
	return p
}

// volume returns the host directory of the named volume.
func (p *testPod) volume(name string) string {
	p.t.Helper()
	d, ok := p.volumes[name]
	if !ok {
		p.t.Fatalf("the pod has no volume %q", name)
	}
	return d
}

// container returns the pod's container (or init container) named name.
func (p *testPod) container(name string) *corev1.Container {
	p.t.Helper()
	for _, cs := range [][]corev1.Container{p.spec.InitContainers, p.spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	p.t.Fatalf("the pod has no container %q", name)
	return nil
}

// user is the container's user and group, the container's securityContext over the pod's (0: root).
func (p *testPod) user(c *corev1.Container) (uid, gid int64) {
	if sc := p.spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	return uid, gid
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)`)

// argv is the container's command line as kubelet runs it: command (else the image's entrypoint) then args, with
// $(VAR) expanded from the container's env (a downward API field from p.env, an annotation as "").
func (p *testPod) argv(c *corev1.Container, entrypoint []string) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			env[e.Name] = p.env[e.ValueFrom.FieldRef.FieldPath]
		case e.ValueFrom == nil:
			env[e.Name] = varRef.ReplaceAllStringFunc(e.Value, func(m string) string {
				if v, ok := env[m[2:len(m)-1]]; ok {
					return v
				}
				return m
			})
		}
	}
	expand := func(s string) string {
		return varRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		})
	}
	cmd := c.Command
	if len(cmd) == 0 {
		cmd = entrypoint
	}
	var out []string
	for _, a := range append(append([]string{}, cmd...), c.Args...) {
		out = append(out, expand(a))
	}
	return out
}

// envOf is the container's environment as kubelet gives it (values and downward API fields).
func (p *testPod) envOf(c *corev1.Container) []string {
	out := []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			out = append(out, e.Name+"="+p.env[e.ValueFrom.FieldRef.FieldPath])
		case e.ValueFrom == nil:
			out = append(out, e.Name+"="+e.Value)
		}
	}
	return out
}

// q quotes s for sh.
func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// rootScript is the shell script that builds the container's root at root and execs "$@" in it.
func (p *testPod) rootScript(c *corev1.Container, root string) string {
	p.t.Helper()
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("set -eu")
	line("mount -t tmpfs -o mode=0755 root %s", q(root))
	bind := func(src, dst string, dir, ro bool) {
		target := filepath.Join(root, dst)
		if dir {
			line("mkdir -p %s", q(target))
		} else {
			line("mkdir -p %s && touch %s", q(filepath.Dir(target)), q(target))
		}
		line("mount --bind %s %s", q(src), q(target))
		if ro {
			line("mount -o remount,bind,ro %s", q(target))
		}
	}
	for dst, src := range p.images[c.Name] {
		st, err := os.Stat(src)
		if err != nil {
			p.t.Fatalf("image file of %s: %v", c.Name, err)
		}
		bind(src, dst, st.IsDir(), true)
	}
	for _, dev := range []string{"null", "zero", "random", "urandom"} {
		bind("/dev/"+dev, "/dev/"+dev, false, false)
	}
	line("mkdir -p %s %s && mount -t tmpfs -o mode=1777 shm %s", q(root+"/dev/shm"), q(root+"/proc"), q(root+"/dev/shm"))
	line("mount -t proc proc %s", q(root+"/proc"))
	readOnlyRoot := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
	if !readOnlyRoot {
		line("mkdir -p %s && mount -t tmpfs -o mode=1777 tmp %s", q(root+"/tmp"), q(root+"/tmp"))
	}
	for _, vm := range c.VolumeMounts {
		src := p.volume(vm.Name)
		if vm.SubPathExpr != "" {
			p.t.Fatalf("container %s mounts %s with subPathExpr: not supported by the harness", c.Name, vm.Name)
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, vm.SubPath)
			if err := os.MkdirAll(src, 0o777); err != nil {
				p.t.Fatal(err)
			}
		}
		bind(src, path.Clean(vm.MountPath), true, vm.ReadOnly)
	}
	if readOnlyRoot {
		line("mount -o remount,ro %s", q(root))
	}
	uid, gid := p.user(c)
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		p.t.Fatal(err)
	}
	line(`exec %s --userspec=%d:%d %s "$@"`, q(chroot), uid, gid, q(root))
	return b.String()
}

// start runs container name with entrypoint (the image's, used when the container sets no command), its output
// to <dir>/<name>.log; it stops in the test's cleanup.
func (p *testPod) start(name string, entrypoint []string) *testproc.Proc {
	p.t.Helper()
	c := p.container(name)
	root := filepath.Join(p.dir, "root", name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		p.t.Fatal(err)
	}
	args := append([]string{"--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
		"sh", "-c", p.rootScript(c, root), "sh"}, p.argv(c, entrypoint)...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = p.envOf(c)
	proc, err := testproc.Start(context.Background(), name, cmd, filepath.Join(p.dir, name+".log"))
	if err != nil {
		p.t.Fatal(err)
	}
	// Stopping unshare (its process group) does not wait for the container's processes, which its --kill-child
	// kills: the cleanup waits for the container's PID 1 to be gone, so that the next case finds its ports free.
	p.t.Cleanup(func() {
		pid, pidErr := initPID(proc)
		proc.Stop(0)
		if pidErr == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if !pollUntil(ctx, nil, func() bool { return gone(pid) }) {
				p.t.Errorf("container %s: its PID 1 (%d) outlived unshare", name, pid)
			}
		}
		if p.t.Failed() {
			p.t.Logf("%s: %s", name, proc.LogEnd(40))
		}
	})
	// The container's stdout belongs to its user, as runc makes it (fixStdioPermissions): a hook that logs into
	// Envoy's output (`drain --log-output=envoy` opens /proc/1/fd/1) can.
	uid, gid := p.user(c)
	if err := os.Chown(proc.LogPath, int(uid), int(gid)); err != nil {
		p.t.Fatal(err)
	}
	return proc
}

// run runs container name to its end (an init container) and fails the test unless it exits 0.
func (p *testPod) run(ctx context.Context, name string, entrypoint []string) {
	p.t.Helper()
	proc := p.start(name, entrypoint)
	select {
	case <-proc.Exited():
	case <-ctx.Done():
		p.t.Fatalf("init container %s did not end: %v", name, ctx.Err())
	}
	if err := proc.Wait(); err != nil {
		p.t.Fatalf("init container %s: %v: %s", name, err, proc.LogEnd(20))
	}
}

// initPID is the host PID of the container's first process (its PID 1): the child `unshare --fork` made.
func initPID(proc *testproc.Proc) (int, error) {
	pid := proc.Cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		return 0, fmt.Errorf("unshare %d has children %q, want one", pid, f)
	}
	return strconv.Atoi(f[0])
}

// gone reports whether process pid has ended: no such process, or every thread of it a zombie (its sockets and
// mounts are released once the last thread has exited; whoever inherited it reaps it in its own time).
func gone(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread has gone
		}
		// pid (comm) state ...: comm may hold spaces and parentheses; the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X' {
			return false
		}
	}
	return true
}

// execIn runs an exec action (command as written) in the running container c (proc, started by start): its mount
// and PID namespaces, its root, its user and env, as kubelet's exec does. It returns the exit code and the output.
func (p *testPod) execIn(ctx context.Context, name string, proc *testproc.Proc, command []string) (int, string) {
	p.t.Helper()
	pid, err := initPID(proc)
	if err != nil {
		p.t.Fatalf("container %s: %v", name, err)
	}
	c := p.container(name)
	uid, gid := p.user(c)
	args := append([]string{"--target", strconv.Itoa(pid), "--mount", "--pid", "--root", "--wd",
		"--setuid", strconv.FormatInt(uid, 10), "--setgid", strconv.FormatInt(gid, 10)}, command...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = p.envOf(c)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		p.t.Fatalf("exec in %s: %v", name, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}
