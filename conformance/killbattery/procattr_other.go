//go:build !linux

package killbattery

import "syscall"

// childProcAttr: only Linux can tie a child's life to its parent's; elsewhere the child's own
// -test.timeout ends an orphan.
func childProcAttr() *syscall.SysProcAttr { return nil }
