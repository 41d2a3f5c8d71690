package pipe

// The driver's end: read commands from stdin, write events to stdout.

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
)

// Writer writes event lines, each flushed at once: the runner times events
// when it reads them. It is safe for concurrent use: claims report from
// their own goroutines.
type Writer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Emit writes ev as one line. An event that cannot be encoded becomes a
// driver_error, so that the runner sees the fault instead of a bad line.
func (o *Writer) Emit(ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		b, _ = json.Marshal(Event{Name: DriverError, Message: err.Error()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}

// DriverError reports a fault of the driver or of a command.
func (o *Writer) DriverError(message string) {
	o.Emit(Event{Name: DriverError, Message: message})
}

// Ready announces the driver: the first event of every driver.
func (o *Writer) Ready(client string, capabilities ...string) {
	if capabilities == nil {
		capabilities = []string{}
	}
	o.Emit(Event{Name: Ready, Client: client, Capabilities: capabilities})
}

// ReadCommands reads command lines from r and passes each to handle, until
// a quit command or the end of r; a line that is not a command is reported
// on o as a driver_error and skipped.
func ReadCommands(r io.Reader, o *Writer, handle func(Command)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var c Command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			o.DriverError("bad command: " + err.Error())
			continue
		}
		if c.Cmd == Quit {
			return
		}
		handle(c)
	}
}
