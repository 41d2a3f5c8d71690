// Package procstat reads a server's memory and CPU time from /proc (Linux),
// summed over the process and its descendants, so PostgreSQL's backends
// count with their postmaster.
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, 100 on every Linux this runs on.
const clockTick = 100

// Tree returns pid and every descendant of it.
func Tree(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := ppid(p); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// stat returns the fields of /proc/pid/stat after the command name.
func stat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("procstat: bad stat line")
	}
	return strings.Fields(string(b[i+1:])), nil
}

func ppid(pid int) (int, error) {
	f, err := stat(pid)
	if err != nil || len(f) < 2 {
		return 0, errors.New("procstat: no ppid")
	}
	return strconv.Atoi(f[1])
}

// CPU returns the user+system CPU time of the tree rooted at pid.
func CPU(pid int) time.Duration {
	var sum time.Duration
	for _, p := range Tree(pid) {
		sum += OwnCPU(p)
	}
	return sum
}

// OwnCPU returns the user+system CPU time of pid alone, without its
// children: a load generator's own time, when the server it measures is
// its child.
func OwnCPU(pid int) time.Duration {
	f, err := stat(pid)
	if err != nil || len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64) // utime: field 14 of the line
	s, _ := strconv.ParseInt(f[12], 10, 64) // stime: field 15
	return time.Duration(u+s) * time.Second / clockTick
}

// Memory returns the proportional set size (Pss) of the tree in bytes,
// falling back to the resident set size where smaps_rollup is not readable.
// Pss counts memory shared between the processes of the tree once.
func Memory(pid int) int64 {
	var total int64
	for _, p := range Tree(pid) {
		if v, ok := field(fmt.Sprintf("/proc/%d/smaps_rollup", p), "Pss:"); ok {
			total += v
		} else if v, ok := field(fmt.Sprintf("/proc/%d/status", p), "VmRSS:"); ok {
			total += v
		}
	}
	return total
}

// field reads a "Name:   123 kB" line of a /proc file, in bytes.
func field(path, name string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		fs := strings.Fields(line[len(name):])
		if len(fs) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fs[0], 10, 64)
		return kb * 1024, err == nil
	}
	return 0, false
}

// ListenerPID finds the process that listens on 127.0.0.1:port, by the
// socket inode in /proc/net/tcp and the process holding it.
func ListenerPID(port int) (int, error) {
	inode, err := listenInode(port)
	if err != nil {
		return 0, err
	}
	target := "socket:[" + inode + "]"
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if l, err := os.Readlink(fd); err == nil && l == target {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("procstat: no process holds the listener on port %d", port)
}

// listenInode looks in /proc/net/tcp and tcp6: a Java server bound to
// 127.0.0.1 may still use an IPv6 socket (an IPv4-mapped address).
func listenInode(port int) (string, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return "", err
	}
	b6, _ := os.ReadFile("/proc/net/tcp6")
	want := fmt.Sprintf(":%04X", port)
	lines := append(strings.Split(string(b), "\n")[1:], strings.Split(string(b6), "\n")...)
	for _, line := range lines {
		f := strings.Fields(line)
		// local_address, state 0A = LISTEN, inode is field 9
		if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return f[9], nil
		}
	}
	return "", fmt.Errorf("procstat: nothing listens on port %d", port)
}

// RSS returns the resident set size of pid alone (VmRSS of
// /proc/pid/status) in bytes, 0 when it cannot be read.
func RSS(pid int) int64 {
	v, _ := field(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
	return v
}
