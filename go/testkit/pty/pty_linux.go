// Package pty runs a program in a new pseudo-terminal, as a person runs it
// in a terminal window: the program is the session leader, with the
// terminal as its controlling terminal and on stdin, stdout and stderr.
// Tests of `monolock run` use it for what only a terminal does: the
// foreground process group, Ctrl-C and Ctrl-Z, a shell's job control.
//
// Like the rest of testkit it imports nothing but the standard library.
package pty

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// Session is a program running on a new pseudo-terminal.
type Session struct {
	Cmd    *exec.Cmd
	t      testing.TB
	master *os.File
	wait   time.Duration
	mu     sync.Mutex
	out    strings.Builder
	more   chan struct{} // closed and replaced when output arrives
	exited chan struct{}
}

// Start runs argv in dir on a new terminal until the test ends (then the
// whole session gets SIGKILL). wait bounds every wait of the session's
// methods.
func Start(t testing.TB, dir string, wait time.Duration, argv ...string) *Session {
	t.Helper()
	master, slave, err := open()
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	defer slave.Close() // the session has its own copies
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		master.Close()
		t.Fatalf("starting %v: %v", argv, err)
	}
	s := &Session{Cmd: cmd, t: t, master: master, wait: wait, more: make(chan struct{}), exited: make(chan struct{})}
	go s.read()
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		// The session's processes get SIGHUP when the terminal goes.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		master.Close()
		<-s.exited
		if t.Failed() {
			t.Logf("terminal output:\n%s", s.Output())
		}
	})
	return s
}

// open returns a new pseudo-terminal's master and slave ends.
func open() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	unlock := int32(0)
	if err = ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err == nil {
		err = ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err == nil {
		slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	}
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := raw.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

func (s *Session) read() {
	buf := make([]byte, 4096)
	for {
		n, err := s.master.Read(buf)
		s.mu.Lock()
		s.out.Write(buf[:n])
		close(s.more)
		s.more = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Output is everything the terminal has shown so far.
func (s *Session) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// WaitOutput waits until the terminal has shown want.
func (s *Session) WaitOutput(want string) {
	s.t.Helper()
	deadline := time.After(s.wait)
	for {
		s.mu.Lock()
		got, more := s.out.String(), s.more
		s.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-more:
		case <-deadline:
			s.t.Fatalf("the terminal did not show %q", want)
		}
	}
}

// Type sends keys as a person types them: "\x03" is Ctrl-C, "\x1a" Ctrl-Z.
func (s *Session) Type(keys string) {
	s.t.Helper()
	if _, err := s.master.Write([]byte(keys)); err != nil {
		s.t.Fatalf("typing %q: %v", keys, err)
	}
}

// Exited is closed when the session's program has ended.
func (s *Session) Exited() <-chan struct{} { return s.exited }

// Status waits for the program to end and returns its exit status.
func (s *Session) Status() int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.Cmd.ProcessState.ExitCode()
	case <-time.After(s.wait):
		s.t.Fatal("the session did not end (a process stopped on the terminal?)")
		return -1
	}
}
