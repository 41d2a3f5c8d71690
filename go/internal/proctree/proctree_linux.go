package proctree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes the calling process the reaper of every orphan
// below it: a daemon that double-forks and calls setsid leaves its
// parent's process group, but it stays below the subreaper, so Descendants
// finds it and wait reaps it. Without this, such a process would go to
// init and could not be told from any other.
func BecomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Read parses /proc/PID/stat.
func Read(pid int) (Proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Proc{}, err
	}
	return parseStat(b)
}

var errBadStat = errors.New("unexpected /proc/PID/stat layout")

// parseStat reads "pid (comm) state ppid ... starttime ...". The command
// name may hold spaces and parentheses, so the fields after it are found
// from the last ')'.
func parseStat(b []byte) (Proc, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Proc{}, errBadStat
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Proc{}, errBadStat
	}
	// After ")": state(3) ppid(4) pgrp(5) ... starttime(22).
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Proc{}, errBadStat
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return Proc{}, errBadStat
	}
	return Proc{Pid: pid, PPid: ppid, Start: start, State: f[0][0], Comm: string(b[open+1 : end])}, nil
}

// Descendants lists the processes below root. Where the kernel keeps a
// list of children per thread (/proc/PID/task/TID/children), it walks the
// tree: the cost grows with the tree, not with every process on the
// machine, which matters when the kill must be quick on a busy one.
// Elsewhere it makes one pass over all of /proc. A process that forks or is
// re-parented during the look may be missed: the callers look again until
// nothing is left.
func Descendants(root int) []Proc {
	if hasChildrenLists() {
		return walkChildren(root)
	}
	return scanAll(root)
}

// hasChildrenLists reports whether /proc has children lists, from the one
// of this process's main thread.
var hasChildrenLists = sync.OnceValue(func() bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d/children", os.Getpid(), os.Getpid()))
	return err == nil
})

// walkChildren follows the children lists down from root.
func walkChildren(root int) []Proc {
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, pid := range childrenOf(parent) {
			p, err := Read(pid)
			if err != nil || p.PPid != parent {
				continue // gone, or re-parented since: the next look finds it
			}
			out = append(out, p)
			queue = append(queue, pid)
		}
	}
	return out
}

// childrenOf returns the children of every thread of pid; none if it has
// gone.
func childrenOf(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var kids []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if k, err := strconv.Atoi(string(f)); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}

// scanAll finds the processes below root from one pass over /proc.
func scanAll(root int) []Proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]Proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		if p, err := Read(pid); err == nil {
			children[p.PPid] = append(children[p.PPid], p)
		}
	}
	var out []Proc
	queue := []int{root}
	for len(queue) > 0 {
		next := children[queue[0]]
		queue = queue[1:]
		for _, p := range next {
			out = append(out, p)
			queue = append(queue, p.Pid)
		}
	}
	return out
}

// Signal sends sig to p, and to no other process: a pidfd pins the
// process, and the start time read after opening it proves that the pid
// was not reused since the pass over /proc. It reports whether the signal
// was sent.
func Signal(p Proc, sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(p.Pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		// A kernel without pidfds (before 5.3): the check and the
		// kill are microseconds apart.
		return Same(p) && unix.Kill(p.Pid, sig) == nil
	}
	if err != nil {
		return false // gone already
	}
	defer unix.Close(fd)
	return Same(p) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// Same reports whether p's pid still belongs to p.
func Same(p Proc) bool {
	now, err := Read(p.Pid)
	return err == nil && now.Start == p.Start
}

// Stopped reports whether the process pid is stopped now (state T, or t
// when traced).
func Stopped(pid int) bool {
	p, err := Read(pid)
	return err == nil && (p.State == 'T' || p.State == 't')
}
