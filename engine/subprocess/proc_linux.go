package subprocess

import "syscall"

// sysProcAttr puts the runner in its own process group, so Stop can signal
// everything it spawned, and has the kernel kill it if meshd dies first, so
// a model is never left holding memory with no supervisor.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
