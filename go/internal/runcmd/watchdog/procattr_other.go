//go:build unix && !linux

package watchdog

import "syscall"

// CommandAttr puts the command in its own process group.
func CommandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
