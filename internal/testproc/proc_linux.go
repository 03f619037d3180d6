package testproc

import "syscall"

// setSysProcAttr puts the process in a process group of its own, so that a terminal's Ctrl-C reaches only the
// test binary (whose cleanup then decides how the process ends) and Stop can end the group by its PID, and has
// the kernel SIGKILL the process if the thread that started it dies, so that a crashed or killed test binary
// leaves no Envoy, etcd or kubelet behind.
func setSysProcAttr(a *syscall.SysProcAttr) {
	a.Setpgid = true
	a.Pdeathsig = syscall.SIGKILL
}
