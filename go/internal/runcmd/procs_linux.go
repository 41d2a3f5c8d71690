package runcmd

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

// becomeSubreaper makes monolock run the reaper of every orphan among the
// command's descendants: a daemon that double-forks and calls setsid
// leaves the command's process group, but it stays below monolock run, so
// descendants finds it and wait reaps it. Without this, such a process
// would go to init and could not be told from any other.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// readProc parses /proc/PID/stat.
func readProc(pid int) (proc, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, err
	}
	return parseStat(b)
}

var errBadStat = errors.New("unexpected /proc/PID/stat layout")

// parseStat reads "pid (comm) state ppid ... starttime ...". The command
// name may hold spaces and parentheses, so the fields after it are found
// from the last ')'.
func parseStat(b []byte) (proc, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return proc{}, errBadStat
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return proc{}, errBadStat
	}
	// After ")": state(3) ppid(4) pgrp(5) ... starttime(22).
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return proc{}, errBadStat
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64)
	if err1 != nil || err2 != nil {
		return proc{}, errBadStat
	}
	return proc{pid: pid, ppid: ppid, start: start, state: f[0][0], comm: string(b[open+1 : end])}, nil
}

// descendants lists the processes below root. Where the kernel keeps a
// list of children per thread (/proc/PID/task/TID/children), it walks the
// tree: the cost grows with the tree, not with every process on the
// machine, which matters when the kill must be quick on a busy one.
// Elsewhere it makes one pass over all of /proc. A process that forks or is
// re-parented during the look may be missed: the callers look again until
// nothing is left.
func descendants(root int) []proc {
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
func walkChildren(root int) []proc {
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, pid := range childrenOf(parent) {
			p, err := readProc(pid)
			if err != nil || p.ppid != parent {
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
func scanAll(root int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]proc{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue // not a process
		}
		if p, err := readProc(pid); err == nil {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []proc
	queue := []int{root}
	for len(queue) > 0 {
		next := children[queue[0]]
		queue = queue[1:]
		for _, p := range next {
			out = append(out, p)
			queue = append(queue, p.pid)
		}
	}
	return out
}

// signalProc sends sig to p, and to no other process: a pidfd pins the
// process, and the start time read after opening it proves that the pid
// was not reused since the pass over /proc. It reports whether the signal
// was sent.
func signalProc(p proc, sig syscall.Signal) bool {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ENOSYS) {
		// A kernel without pidfds (before 5.3): the check and the
		// kill are microseconds apart.
		return sameProc(p) && unix.Kill(p.pid, sig) == nil
	}
	if err != nil {
		return false // gone already
	}
	defer unix.Close(fd)
	return sameProc(p) && unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// sameProc reports whether p's pid still belongs to p.
func sameProc(p proc) bool {
	now, err := readProc(p.pid)
	return err == nil && now.start == p.start
}
