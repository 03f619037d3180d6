package kubetest

import "syscall"

// sysProcAttr puts a process in its own process group, so that a terminal's Ctrl-C reaches only the test binary
// (whose cleanup then stops it), and has the kernel SIGKILL it if the thread that started it dies, so that a
// crashed or killed test binary leaves no etcd or kube-apiserver behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group pgid: the data is temporary, so nothing is gained by a graceful stop.
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
