package watchdog

import "syscall"

// CommandAttr puts the command in its own process group, so that one
// signal reaches every process of it that stays there. On Linux the command
// also gets SIGKILL if its parent dies without the chance to stop it.
func CommandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
