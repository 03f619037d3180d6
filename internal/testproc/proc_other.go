//go:build unix && !linux

package testproc

import "syscall"

// setSysProcAttr puts the process in a process group of its own, so that a terminal's Ctrl-C reaches only the
// test binary (whose cleanup then decides how the process ends) and Stop can end the group by its PID.
func setSysProcAttr(a *syscall.SysProcAttr) {
	a.Setpgid = true
}
