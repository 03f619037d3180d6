//go:build unix && !linux

package testbed

import "syscall"

// sysProcAttr puts Envoy in its own process group, so that a terminal's
// Ctrl-C reaches only the controlling program (which then decides how Envoy
// ends).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killGroup sends SIGKILL to the process group pgid (a wrapper started by
// Start and the Envoy it runs).
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }
