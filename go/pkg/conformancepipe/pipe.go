// Package conformancepipe is the driver's end of the conformance pipe
// protocol of docs/writing-a-client.md: JSON commands read from stdin, JSON
// events written to stdout, one object per line. The Go driver
// (go/cmd/conformance_driver) and the mutants' base client
// (conformance/mutants) share it, so both read and write the protocol the
// same way; what a command does stays with each driver. It is in this
// module, not in conformance/, because the conformance module depends on
// this one and never the other way round.
package conformancepipe

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Command is one line from the runner. Pointer fields are absent or null
// when nil.
type Command struct {
	Cmd              string   `json:"cmd"`
	ID               string   `json:"id"`
	Servers          []string `json:"servers"`
	Name             *string  `json:"name"`
	NameHex          *string  `json:"name_hex"`
	LeaseMS          *uint64  `json:"lease_ms"`
	Mode             string   `json:"mode"`
	TimeoutMS        *int64   `json:"timeout_ms"`
	ConnectTimeoutMS *int64   `json:"connect_timeout_ms"`
	TLS              *TLS     `json:"tls"`
}

// TLS is the tls object of an acquire command: PEM files and the name the
// server's certificate must carry (nil: the host of the address).
type TLS struct {
	CAFile     string  `json:"ca_file"`
	CertFile   string  `json:"cert_file"`
	KeyFile    string  `json:"key_file"`
	ServerName *string `json:"server_name"`
}

// ErrNoName is LockName's error for a command with neither name nor
// name_hex.
var ErrNoName = errors.New("no name")

// LockName returns the name to lock: name_hex decoded when present (any
// bytes, invalid UTF-8 included), else name.
func (c Command) LockName() (string, error) {
	if c.NameHex != nil {
		b, err := hex.DecodeString(*c.NameHex)
		if err != nil {
			return "", fmt.Errorf("name_hex: %w", err)
		}
		return string(b), nil
	}
	if c.Name == nil {
		return "", ErrNoName
	}
	return *c.Name, nil
}

// Writer writes event lines, each flushed at once. It is safe for
// concurrent use: claims report from their own goroutines.
type Writer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Emit writes ev as one line. An event that cannot be encoded becomes a
// driver_error, so that the runner sees the fault instead of a bad line.
func (o *Writer) Emit(ev map[string]any) {
	b, err := json.Marshal(ev)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"event": "driver_error", "message": err.Error()})
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}

// DriverError reports a fault of the driver or of a command.
func (o *Writer) DriverError(message string) {
	o.Emit(map[string]any{"event": "driver_error", "message": message})
}

// Ready announces the driver: the first event of every driver.
func (o *Writer) Ready(client string, capabilities ...string) {
	o.Emit(map[string]any{"event": "ready", "client": client, "capabilities": capabilities})
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
		if c.Cmd == "quit" {
			return
		}
		handle(c)
	}
}
