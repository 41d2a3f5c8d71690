//go:build unix

package watchdog

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Kind is what an Event tells.
type Kind int

const (
	Started Kind = iota // the command runs: Pid
	Failed              // the command could not be started: Status (126 or 127), Text
	Stopped             // the command was stopped (Ctrl-Z on its terminal, SIGTTIN, SIGSTOP)
	Exited              // the command ended: Wait; what it started may still run
	Killing             // the deadline passed, or monolock run went away: the kill begins
	Killed              // the kill is over, everything reaped: Count, LastReaped
)

// Event is one message of the watchdog to monolock run.
type Event struct {
	Kind       Kind
	Pid        int
	Status     int
	Text       string
	Wait       unix.WaitStatus
	Count      int       // processes that got SIGKILL
	LastReaped time.Time // when the last of them was reaped
}

// line encodes e as one line of the event pipe.
func (e Event) line() string {
	switch e.Kind {
	case Started:
		return fmt.Sprintf("started %d\n", e.Pid)
	case Failed:
		return fmt.Sprintf("failed %d %s\n", e.Status, strings.ReplaceAll(e.Text, "\n", " "))
	case Stopped:
		return "stopped\n"
	case Exited:
		return fmt.Sprintf("exited %d\n", uint32(e.Wait))
	case Killing:
		return "killing\n"
	default:
		return fmt.Sprintf("killed %d %d\n", e.Count, toMono(e.LastReaped))
	}
}

// parseEvent decodes one line of the event pipe, without its newline.
func parseEvent(line string) (Event, error) {
	word, rest, _ := strings.Cut(line, " ")
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	bad := fmt.Errorf("watchdog: unexpected message %q", line)
	switch word {
	case "started":
		if pid := num(rest); pid > 0 {
			return Event{Kind: Started, Pid: int(pid)}, nil
		}
	case "failed":
		status, text, _ := strings.Cut(rest, " ")
		if s := num(status); s > 0 {
			return Event{Kind: Failed, Status: int(s), Text: text}, nil
		}
	case "stopped":
		return Event{Kind: Stopped}, nil
	case "killing":
		return Event{Kind: Killing}, nil
	case "exited":
		if ws := num(rest); ws >= 0 {
			return Event{Kind: Exited, Wait: unix.WaitStatus(ws)}, nil
		}
	case "killed":
		count, at, _ := strings.Cut(rest, " ")
		if n, m := num(count), num(at); n >= 0 && m >= 0 {
			return Event{Kind: Killed, Count: int(n), LastReaped: fromMono(time.Duration(m))}, nil
		}
	}
	return Event{}, bad
}

// A control message of monolock run to the watchdog.
type control struct {
	release bool          // the command ended under the lock: leave when it is reaped
	killAt  time.Duration // else: the new deadline, on CLOCK_MONOTONIC
}

func (c control) line() string {
	if c.release {
		return "release\n"
	}
	return fmt.Sprintf("kill-at %d\n", c.killAt)
}

func parseControl(line string) (control, error) {
	if line == "release" {
		return control{release: true}, nil
	}
	if v, ok := strings.CutPrefix(line, "kill-at "); ok {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil && ns >= 0 {
			return control{killAt: time.Duration(ns)}, nil
		}
	}
	return control{}, fmt.Errorf("watchdog: unexpected control %q", line)
}
