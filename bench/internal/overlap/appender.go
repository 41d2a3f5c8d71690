package overlap

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// Variant is how the held command behaves when told to stop.
type Variant string

// The variants, in report order.
const (
	// Plain appends and dies of SIGTERM, as most programs do.
	Plain Variant = "plain"
	// IgnoresTerm ignores SIGTERM: only SIGKILL stops it.
	IgnoresTerm Variant = "ignores-sigterm"
	// SetsidChild starts the appender as a grandchild in a session (and
	// process group) of its own, and waits for it: the grandchild is out
	// of the command's process group, as a daemon started with setsid is.
	SetsidChild Variant = "setsid-grandchild"
)

// Variants lists every variant in report order.
var Variants = []Variant{Plain, IgnoresTerm, SetsidChild}

// args are the flags of `bench append` for v.
func (v Variant) args() []string {
	switch v {
	case IgnoresTerm:
		return []string{"-ignore-sigterm"}
	case SetsidChild:
		return []string{"-setsid"}
	}
	return nil
}

// AppendMain is `bench append`: the held command. It appends
// CLOCK_MONOTONIC to -file every -every until -for has passed since it
// started, then writes "# end" and exits 0. It exits by itself after -for
// at the latest, whatever happened to the lock.
func AppendMain(args []string) int {
	fs := flag.NewFlagSet("bench append", flag.ContinueOnError)
	file := fs.String("file", "", "`file` to append to (created if needed)")
	every := fs.Duration("every", 2*time.Millisecond, "time between appends")
	length := fs.Duration("for", 10*time.Second, "the job's length: stop appending after this long")
	ignoreTerm := fs.Bool("ignore-sigterm", false, "ignore SIGTERM")
	setsid := fs.Bool("setsid", false, "start the appender as a grandchild in a session of its own, and wait for it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" || *every <= 0 || *length <= 0 || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: bench append -file F [-every D] [-for D] [-ignore-sigterm | -setsid]")
		return 2
	}
	deadline := time.Now().Add(*length)
	f, err := os.OpenFile(*file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s%d\n", pidPrefix, os.Getpid()); err != nil {
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	if *setsid {
		return grandchild(*file, *every, time.Until(deadline))
	}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
	}
	buf := make([]byte, 0, 24)
	for time.Now().Before(deadline) {
		buf = strconv.AppendInt(buf[:0], Now(), 10)
		buf = append(buf, '\n')
		if _, err := f.Write(buf); err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			return 1
		}
		time.Sleep(*every)
	}
	if _, err := f.WriteString(endLine + "\n"); err != nil {
		return 1
	}
	return 0
}

// grandchild runs the appender in a new session and waits for it; this
// process keeps SIGTERM's default, so a SIGTERM to the command's process
// group ends it and leaves the grandchild running.
func grandchild(file string, every, left time.Duration) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	cmd := exec.Command(self, "append", "-file", file, "-every", every.String(), "-for", max(left, time.Millisecond).String())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "append:", err)
		return 1
	}
	return 0
}
