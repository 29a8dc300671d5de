package killbattery

import "syscall"

// childProcAttr makes the kernel kill a child when the parent test process dies, so that a
// crashed or timed-out test leaves no consumer running.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
