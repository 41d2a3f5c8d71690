package conformancepipe

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestLockNamePrefersHex(t *testing.T) {
	name, hexName, badHex := "plain", "ff00", "zz"
	cases := []struct {
		c       Command
		want    string
		wantErr error
	}{
		{Command{Name: &name}, "plain", nil},
		{Command{Name: &name, NameHex: &hexName}, "\xff\x00", nil},
		{Command{}, "", ErrNoName},
	}
	for _, tc := range cases {
		got, err := tc.c.LockName()
		if got != tc.want || !errors.Is(err, tc.wantErr) {
			t.Errorf("LockName() = %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
		}
	}
	if _, err := (Command{NameHex: &badHex}).LockName(); err == nil || !strings.HasPrefix(err.Error(), "name_hex: ") {
		t.Errorf("bad name_hex: %v", err)
	}
}

// Commands reach the handler in order; a bad line is a driver_error; quit
// ends the reading and is not handed on.
func TestReadCommands(t *testing.T) {
	in := strings.NewReader(`{"cmd":"acquire","id":"a","lease_ms":5000,"tls":{"ca_file":"ca.pem"}}
not json
{"cmd":"release","id":"a"}
{"cmd":"quit"}
{"cmd":"release","id":"after"}
`)
	var out bytes.Buffer
	o := NewWriter(&out)
	var got []Command
	ReadCommands(in, o, func(c Command) { got = append(got, c) })

	if len(got) != 2 || got[0].Cmd != "acquire" || got[1].Cmd != "release" {
		t.Fatalf("handled %+v", got)
	}
	if got[0].LeaseMS == nil || *got[0].LeaseMS != 5000 || got[0].TLS == nil || got[0].TLS.CAFile != "ca.pem" {
		t.Errorf("acquire decoded as %+v", got[0])
	}
	var ev map[string]any
	if err := json.Unmarshal(out.Bytes(), &ev); err != nil {
		t.Fatalf("one event line: %q: %v", out.String(), err)
	}
	if ev["event"] != "driver_error" || !strings.HasPrefix(ev["message"].(string), "bad command: ") {
		t.Errorf("event %v", ev)
	}
}

func TestWriterLines(t *testing.T) {
	var out bytes.Buffer
	o := NewWriter(&out)
	o.Ready("go", "cancel", "tls")
	o.Emit(map[string]any{"event": "bad", "x": func() {}}) // cannot be encoded
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	if lines[0] != `{"capabilities":["cancel","tls"],"client":"go","event":"ready"}` {
		t.Errorf("ready line %s", lines[0])
	}
	if !strings.HasPrefix(lines[1], `{"event":"driver_error","message":"json: unsupported type`) {
		t.Errorf("unencodable event became %s", lines[1])
	}
}
