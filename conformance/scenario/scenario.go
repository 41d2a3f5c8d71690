// Package scenario loads the conformance scenarios of spec/scenarios: one
// JSON file per scenario, a list of steps run in order and checks evaluated
// once the driver has exited. The language is documented in
// spec/scenarios/README.md; this package rejects anything it does not
// describe, so a typo in a scenario fails loudly instead of testing nothing.
package scenario

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/monolock/monolock/conformance/tlscerts"
)

// Back ends.
const (
	BackendServer = "server" // the real Go server, started per run
	BackendFake   = "fake"   // the scripted fake server
	BackendProxy  = "proxy"  // the real server behind the fault proxy
)

// ClassSafety is the class of scenarios that run strictly (see Scenario.Class).
const ClassSafety = "safety"

// Scenario is one file of spec/scenarios.
type Scenario struct {
	Name        string `json:"-"` // file name without .json
	Description string `json:"description"`
	// Class "safety" marks a scenario that pins a safety rule (loss,
	// deadlines, FIN order, grants): the runner never reruns it, so a miss
	// can never be turned into a pass. "" is an ordinary scenario.
	Class     string   `json:"class,omitempty"`
	Backend   string   `json:"backend"`
	Requires  []string `json:"requires,omitempty"`
	TimeoutMS int      `json:"timeout_ms,omitempty"`
	Server    *Server  `json:"server,omitempty"`
	Steps     []Step   `json:"steps"`
	Checks    []Check  `json:"checks,omitempty"`
}

// Server configures the real server of a "server" scenario. The runner
// makes the certificates (package tlscerts) and the ACL file per run.
type Server struct {
	// TLS serves TLS with a certificate for 127.0.0.1 and localhost signed
	// by the run's CA; every acquire then carries tls (capability "tls").
	TLS bool `json:"tls,omitempty"`
	// ClientCA requires client certificates signed by the run's CA.
	ClientCA bool `json:"client_ca,omitempty"`
	// ACL holds the lines of the --acl file; absent: no --acl (an empty
	// list is an empty file, which denies everything).
	ACL []string `json:"acl,omitempty"`
	// MaxLeaseMS is the server's --max-lease in milliseconds; 0: none.
	MaxLeaseMS int64 `json:"max_lease_ms,omitempty"`
}

// StepTLS is the tls object of an acquire step on a TLS server: the runner
// adds the CA file; these pick a client certificate and the server name.
type StepTLS struct {
	Cert       string  `json:"cert,omitempty"`        // a name of tlscerts.Clients
	ServerName *string `json:"server_name,omitempty"` // absent: the host of the address
}

// Step is one action or expectation. Op selects which fields apply.
type Step struct {
	Op   string `json:"op"`
	Note string `json:"note,omitempty"`

	// Driver commands: acquire, release, cancel. Expectations: expect, no_event.
	ID               string                     `json:"id,omitempty"`
	Name             *string                    `json:"name,omitempty"`
	NameHex          *string                    `json:"name_hex,omitempty"`
	LeaseMS          *int64                     `json:"lease_ms,omitempty"`
	Mode             string                     `json:"mode,omitempty"`
	TimeoutMS        *int64                     `json:"timeout_ms,omitempty"`
	ConnectTimeoutMS *int64                     `json:"connect_timeout_ms,omitempty"`
	TLS              *StepTLS                   `json:"tls,omitempty"`
	Shared           bool                       `json:"shared,omitempty"`
	Limit            *int                       `json:"limit,omitempty"`
	Value            *string                    `json:"value,omitempty"`   // acquire (a campaign) and proclaim
	Session          string                     `json:"session,omitempty"` // acquire: the id of the session it goes on
	Event            string                     `json:"event,omitempty"`
	Fields           map[string]json.RawMessage `json:"fields,omitempty"`
	At               *Window                    `json:"at,omitempty"`
	Optional         bool                       `json:"optional,omitempty"`
	// Skipping lets expect pass over events of its id, of its event name,
	// that match one of these field sets (an observer's intermediate
	// states, which it may or may not see), until the expected one.
	Skipping []map[string]json.RawMessage `json:"skipping,omitempty"`

	// Connections (fake server and proxy).
	Conn    string `json:"conn,omitempty"`
	Hex     string `json:"hex,omitempty"`
	Chunk   int    `json:"chunk,omitempty"`
	GapMS   int    `json:"gap_ms,omitempty"`
	DelayMS int    `json:"delay_ms,omitempty"`
	Count   int    `json:"count,omitempty"`
	Fault   string `json:"fault,omitempty"`
	Dir     string `json:"dir,omitempty"`

	// Common.
	WithinMS int    `json:"within_ms,omitempty"`
	MS       int    `json:"ms,omitempty"`
	As       string `json:"as,omitempty"`
}

// Window bounds the time of an event relative to a mark. Bounds given in
// lease units are multiplied by the lease of the step's id.
type Window struct {
	From     string   `json:"from"`
	MinMS    *float64 `json:"min_ms,omitempty"`
	MaxMS    *float64 `json:"max_ms,omitempty"`
	MinLease *float64 `json:"min_lease,omitempty"`
	MaxLease *float64 `json:"max_lease,omitempty"`
}

// Check is evaluated after the driver has exited.
type Check struct {
	Check string `json:"check"`
	Note  string `json:"note,omitempty"`

	Conn     string   `json:"conn,omitempty"`
	Max      int      `json:"max,omitempty"`
	Count    *int     `json:"count,omitempty"`
	Hex      *string  `json:"hex,omitempty"`
	IDs      []string `json:"ids,omitempty"`
	LeaseMS  float64  `json:"lease_ms,omitempty"`
	RTTMS    float64  `json:"rtt_ms,omitempty"`
	TolLease float64  `json:"tol_lease,omitempty"`
	Skip     int      `json:"skip,omitempty"`
	MinCount int      `json:"min_count,omitempty"`
}

// Ops allowed per back end ("" = every back end).
var ops = map[string]string{
	"acquire": "", "release": "", "cancel": "", "expect": "", "no_event": "", "observe": "", "proclaim": "",
	"session": "server proxy",
	"pause":   "", "mark": "", "accept": "fake proxy", "await_heartbeats": "fake proxy",
	"await_close": "fake proxy",
	"recv":        "fake", "send": "fake", "respond": "fake", "silence": "fake", "close": "fake",
	"reset": "fake proxy", "fault": "proxy", "kick": "server proxy",
}

var checks = map[string]string{
	"max_in_flight": "fake proxy", "heartbeat_interval": "fake proxy",
	"client_bytes": "fake proxy", "connections": "fake proxy", "tokens_increasing": "",
}

// Events a driver may print, from docs/writing-a-client.md.
var events = map[string]bool{"waiting": true, "acquired": true, "error": true, "lost": true, "released": true,
	"proclaimed": true, "observed": true, "opened": true}

// DecodeHex decodes hex that may contain spaces for readability.
func DecodeHex(s string) ([]byte, error) {
	return hex.DecodeString(strings.Join(strings.Fields(s), ""))
}

// LoadDir loads every *.json file of dir, sorted by name.
func LoadDir(dir string) ([]*Scenario, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*Scenario
	for _, f := range files {
		s, err := LoadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no scenarios in %s", dir)
	}
	return out, nil
}

// LoadFile loads and validates one scenario.
func LoadFile(path string) (*Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Scenario
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s.Name = strings.TrimSuffix(filepath.Base(path), ".json")
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &s, nil
}

func allowed(where, backend string) bool {
	return where == "" || strings.Contains(" "+where+" ", " "+backend+" ")
}

func (s *Scenario) validate() error {
	if s.Description == "" {
		return fmt.Errorf("missing description")
	}
	if s.Class != "" && s.Class != ClassSafety {
		return fmt.Errorf("class %q: want %q or none", s.Class, ClassSafety)
	}
	switch s.Backend {
	case BackendServer, BackendFake, BackendProxy:
	default:
		return fmt.Errorf("backend %q: want server, fake or proxy", s.Backend)
	}
	if err := s.validateServer(); err != nil {
		return err
	}
	ids := map[string]bool{}
	sessions := map[string]bool{} // ids of session steps
	conns := map[string]bool{}
	for i, st := range s.Steps {
		where, ok := ops[st.Op]
		if !ok {
			return fmt.Errorf("step %d: unknown op %q", i+1, st.Op)
		}
		if !allowed(where, s.Backend) {
			return fmt.Errorf("step %d: op %s needs back end %s", i+1, st.Op, where)
		}
		bad := func(msg string) error { return fmt.Errorf("step %d (%s): %s", i+1, st.Op, msg) }
		switch st.Op {
		case "acquire":
			if st.ID == "" || st.LeaseMS == nil || (st.Name == nil) == (st.NameHex == nil) {
				return bad("needs id, lease_ms and exactly one of name, name_hex")
			}
			if st.Mode != "wait" && st.Mode != "try" {
				return bad("mode must be wait or try")
			}
			if st.Limit != nil && !st.Shared {
				return bad("limit makes a semaphore: it needs shared")
			}
			if st.Shared && !slices.Contains(s.Requires, "shared") {
				return bad(`shared needs "requires": ["shared"]`)
			}
			if st.Value != nil && !slices.Contains(s.Requires, "election") {
				return bad(`value needs "requires": ["election"]`)
			}
			if st.Session != "" && !sessions[st.Session] {
				return bad(fmt.Sprintf("session %q: no session step opened it before", st.Session))
			}
			if st.TLS != nil {
				if s.Server == nil || !s.Server.TLS {
					return bad("tls needs a scenario whose server has tls")
				}
				if _, ok := tlscerts.Clients[st.TLS.Cert]; st.TLS.Cert != "" && !ok {
					return bad(fmt.Sprintf("tls.cert %q: no such client certificate (see spec/scenarios/README.md)", st.TLS.Cert))
				}
			}
			ids[st.ID] = true
		case "session":
			if st.ID == "" || st.LeaseMS == nil || ids[st.ID] {
				return bad("needs a new id and lease_ms")
			}
			if !slices.Contains(s.Requires, "sessions") {
				return bad(`session needs "requires": ["sessions"]`)
			}
			ids[st.ID], sessions[st.ID] = true, true
		case "observe":
			if st.ID == "" || st.LeaseMS == nil || st.Name == nil || ids[st.ID] {
				return bad("needs a new id, lease_ms and name")
			}
			if !slices.Contains(s.Requires, "election") {
				return bad(`observe needs "requires": ["election"]`)
			}
			ids[st.ID] = true
		case "proclaim":
			if !ids[st.ID] || st.Value == nil {
				return bad("needs an acquired id and a value")
			}
		case "kick":
			if st.Name == nil || *st.Name == "" {
				return bad("needs name (the lock whose holder is kicked)")
			}
		case "release", "cancel":
			if !ids[st.ID] {
				return bad("id not acquired before")
			}
		case "expect":
			if !ids[st.ID] || !events[st.Event] {
				return bad("needs an acquired id and a known event")
			}
			if st.At != nil && st.At.From == "" {
				return bad("at needs from")
			}
			if len(st.Skipping) > 0 && st.Optional {
				return bad("skipping and optional exclude each other")
			}
		case "accept":
			if st.Conn == "" || conns[st.Conn] {
				return bad("needs a new conn label")
			}
			conns[st.Conn] = true
		case "recv", "send", "respond":
			if _, err := DecodeHex(st.Hex); err != nil || (st.Hex == "" && st.Op != "respond") {
				return bad("needs hex")
			}
		case "fault":
			switch st.Fault {
			case "fragment", "delay", "blackhole", "clear":
			default:
				return bad("fault must be fragment, delay, blackhole or clear")
			}
			if st.Fault != "clear" && st.Dir != "up" && st.Dir != "down" && st.Dir != "both" {
				return bad("dir must be up, down or both")
			}
		case "mark":
			if st.As == "" {
				return bad("needs as")
			}
		case "pause":
			if st.MS <= 0 {
				return bad("needs ms")
			}
		case "await_heartbeats":
			if st.Count <= 0 {
				return bad("needs count")
			}
		case "await_close":
			if st.At != nil && st.At.From == "" {
				return bad("at needs from")
			}
			leaseUnits := st.At != nil && (st.At.MinLease != nil || st.At.MaxLease != nil)
			if leaseUnits && !ids[st.ID] {
				return bad("at in lease units needs the id whose lease it counts in")
			}
		}
		if st.Conn != "" && st.Op != "accept" && !conns[st.Conn] {
			return bad(fmt.Sprintf("conn %q not accepted before", st.Conn))
		}
		if needsConn(st.Op) && st.Conn == "" && !(st.Op == "reset" && s.Backend == BackendProxy) {
			return bad("needs conn")
		}
	}
	for i, c := range s.Checks {
		where, ok := checks[c.Check]
		if !ok {
			return fmt.Errorf("check %d: unknown check %q", i+1, c.Check)
		}
		if !allowed(where, s.Backend) {
			return fmt.Errorf("check %d: %s needs back end %s", i+1, c.Check, where)
		}
		if c.Conn != "" && c.Conn != "*" && !conns[c.Conn] {
			return fmt.Errorf("check %d: conn %q not accepted", i+1, c.Conn)
		}
		var missing bool
		switch c.Check {
		case "heartbeat_interval":
			missing = c.Conn == "" || c.LeaseMS <= 0 || c.TolLease <= 0 || c.MinCount <= 0
		case "max_in_flight":
			missing = c.Max < 1
		case "connections":
			missing = c.Count == nil
		case "client_bytes":
			missing = c.Hex == nil
			if !missing {
				if _, err := DecodeHex(*c.Hex); err != nil {
					return fmt.Errorf("check %d: bad hex: %v", i+1, err)
				}
			}
		case "tokens_increasing":
			missing = len(c.IDs) < 2
		}
		if missing {
			return fmt.Errorf("check %d: %s lacks a field it needs (see spec/scenarios/README.md)", i+1, c.Check)
		}
	}
	return nil
}

// validateServer checks the server object: real server only, client_ca
// only with tls, and the tls capability required whenever tls is on.
func (s *Scenario) validateServer() error {
	sv := s.Server
	if sv == nil {
		return nil
	}
	if s.Backend != BackendServer {
		return fmt.Errorf("server settings need backend server")
	}
	if sv.ClientCA && !sv.TLS {
		return fmt.Errorf("server.client_ca needs server.tls")
	}
	if sv.TLS && !slices.Contains(s.Requires, "tls") {
		return fmt.Errorf("a TLS server needs \"requires\": [\"tls\"]")
	}
	for i, line := range sv.ACL {
		if strings.ContainsAny(line, "\n\r") {
			return fmt.Errorf("server.acl line %d: one rule per entry", i+1)
		}
	}
	return nil
}

func needsConn(op string) bool {
	switch op {
	case "recv", "send", "respond", "silence", "close", "reset", "await_heartbeats", "await_close":
		return true
	}
	return false
}
