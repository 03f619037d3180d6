package testbed

import "syscall"

// sysProcAttr puts Envoy in its own process group, so that a terminal's
// Ctrl-C reaches only the controlling program (which then decides how Envoy
// ends), and has the kernel SIGKILL Envoy if the thread that started it dies,
// so that a crashed test binary leaves no Envoy behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group pgid (a wrapper started by
// Start and the Envoy it runs).
func killGroup(pgid int) { syscall.Kill(-pgid, syscall.SIGKILL) }
