package pipe

// The runner's end: write commands to a driver, read its events.

import (
	"bytes"
	"encoding/json"
	"errors"
)

// MarshalLine returns c as one command line, newline included.
func (c Command) MarshalLine() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// ErrNotObject is ParseEvent's error for a line that is not a JSON object.
var ErrNotObject = errors.New("not a JSON object")

// ParseEvent reads one event line two ways: typed, for code that acts on
// events, and as the raw object (numbers as json.Number), for the runner,
// which judges what the driver wrote, wrong types included. A field of the
// wrong type is left zero in the typed Event and is not an error: only a
// line that is not a JSON object is.
func ParseEvent(line []byte) (Event, map[string]any, error) {
	var raw map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Event{}, nil, ErrNotObject
	}
	// Decode fills what it can and reports only the first mismatch; the
	// raw object keeps the truth.
	var ev Event
	_ = json.NewDecoder(bytes.NewReader(line)).Decode(&ev)
	return ev, raw, nil
}
