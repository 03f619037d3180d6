//go:build unix && !linux

package testbed

import "syscall"

// sysProcAttr puts Envoy in its own process group, so that a terminal's
// Ctrl-C reaches only the controlling program (which then decides how Envoy
// ends).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
