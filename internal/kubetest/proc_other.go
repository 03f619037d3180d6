//go:build unix && !linux

package kubetest

import "syscall"

// sysProcAttr puts a process in its own process group, so that a terminal's Ctrl-C reaches only the test binary
// (whose cleanup then stops it).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the process group pgid: the data is temporary, so nothing is gained by a graceful stop.
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
