package pipe

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

	if len(got) != 2 || got[0].Cmd != Acquire || got[1].Cmd != Release {
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

// The lines the runner has always sent: absent fields stay absent, a zero
// lease is sent.
func TestCommandLines(t *testing.T) {
	name, zero, timeout := "jobs/x", uint64(0), int64(5000)
	cases := []struct {
		c    Command
		want string
	}{
		{Command{Cmd: Quit}, `{"cmd":"quit"}`},
		{Command{Cmd: Release, ID: "a"}, `{"cmd":"release","id":"a"}`},
		{Command{Cmd: Acquire, ID: "a", Servers: []string{"127.0.0.1:1"}, Name: &name, LeaseMS: &zero, Mode: ModeWait, TimeoutMS: &timeout},
			`{"cmd":"acquire","id":"a","servers":["127.0.0.1:1"],"name":"jobs/x","lease_ms":0,"mode":"wait","timeout_ms":5000}`},
		{Command{Cmd: Acquire, ID: "b", TLS: &TLS{CAFile: "ca.pem"}}, `{"cmd":"acquire","id":"b","tls":{"ca_file":"ca.pem"}}`},
	}
	for _, tc := range cases {
		b, err := tc.c.MarshalLine()
		if err != nil || string(b) != tc.want+"\n" {
			t.Errorf("MarshalLine() = %q, %v; want %s", b, err, tc.want)
		}
	}
}

func TestWriterLines(t *testing.T) {
	var out bytes.Buffer
	o := NewWriter(&out)
	o.Ready("go", "cancel", "tls")
	o.Ready("bare")
	code, temporary, valid := 21, false, 798.5
	o.Emit(Event{Name: Acquired, ID: "a", Token: "17", ValidMS: &valid})
	o.Emit(Event{Name: Error, ID: "a", Kind: "server", Code: &code, Temporary: &temporary, Message: "m"})
	o.Emit(Event{Name: Lost, ID: "a", Kind: "timeout", Message: "m"})
	o.Emit(Event{Name: Released, ID: "a"})
	want := []string{
		`{"event":"ready","client":"go","capabilities":["cancel","tls"]}`,
		`{"event":"ready","client":"bare","capabilities":[]}`,
		`{"event":"acquired","id":"a","token":"17","valid_ms":798.5}`,
		`{"event":"error","id":"a","kind":"server","message":"m","code":21,"temporary":false}`,
		`{"event":"lost","id":"a","kind":"timeout","message":"m","code":null,"temporary":null}`,
		`{"event":"released","id":"a"}`,
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The typed event gets what it can; the raw object keeps what the driver
// wrote, a wrongly typed field included.
func TestParseEvent(t *testing.T) {
	ev, raw, err := ParseEvent([]byte(`{"event":"acquired","id":"a","token":17,"valid_ms":798.5,"t_ms":3}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Name != Acquired || ev.ID != "a" || ev.Token != "" || ev.ValidMS == nil || *ev.ValidMS != 798.5 {
		t.Errorf("typed %+v", ev)
	}
	if raw["token"] != json.Number("17") {
		t.Errorf("raw token %#v", raw["token"])
	}
	ev, _, err = ParseEvent([]byte(`{"event":"ready","client":"python-sync","capabilities":["cancel"]}`))
	if err != nil || ev.Client != "python-sync" || len(ev.Capabilities) != 1 {
		t.Errorf("ready %+v, %v", ev, err)
	}
	if _, _, err := ParseEvent([]byte(`not json`)); !errors.Is(err, ErrNotObject) {
		t.Errorf("bad line: %v", err)
	}
}
