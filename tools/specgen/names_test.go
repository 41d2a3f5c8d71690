package main

import (
	"strings"
	"testing"
)

// The derived names are the clients' public names: a change here renames
// exported classes, variants and variables.
func TestErrorNames(t *testing.T) {
	for _, c := range []struct{ spec, goName, py, ts, rust string }{
		{"SHUTTING_DOWN", "ErrShuttingDown", "ShuttingDown", "ShuttingDownError", "ShuttingDown"},
		{"NAME_NOT_UTF8", "ErrNameNotUTF8", "NameNotUTF8", "NameNotUtf8Error", "NameNotUtf8"},
	} {
		e := errorEntry{Name: c.spec}
		got := []string{goErrName(e), pyErrName(e), tsErrName(e), rustErrName(e)}
		want := []string{c.goName, c.py, c.ts, c.rust}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %v, want %v", c.spec, got, want)
		}
	}
}

func TestConstantNames(t *testing.T) {
	ws := words("heartbeat", "srtt_alpha")
	if got := capWords(ws, true); got != "HeartbeatSRTTAlpha" {
		t.Errorf("Go name %q", got)
	}
	if got := upperSnake(ws); got != "HEARTBEAT_SRTT_ALPHA" {
		t.Errorf("upper snake %q", got)
	}
	if got := tsKey("srtt_alpha") + " " + tsKey("ACQUIRE"); got != "srttAlpha ACQUIRE" {
		t.Errorf("TS keys %q", got)
	}
}
