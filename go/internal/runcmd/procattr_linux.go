package runcmd

import "syscall"

// procAttr puts the command in its own process group. On Linux the command
// also gets SIGKILL if monolock run dies without the chance to stop it (a
// SIGKILL of its own), since the lock is gone then; its descendants cannot
// be reached that way, the fencing token has to protect against those.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
