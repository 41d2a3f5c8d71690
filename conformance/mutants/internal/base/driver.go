// Package base is a minimal, correct monolock client written on raw sockets
// and wrapped in the conformance pipe protocol. Each mutant flips exactly one
// Bugs knob; the base with no knob set must pass every scenario, which proves
// the scenarios are passable, and each knob must fail at least one, which
// proves they can fail.
package base

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
)

// Bugs are the deliberate mistakes a mutant can make.
type Bugs struct {
	// PromotionIsAck takes a promotion that arrives while a heartbeat is in
	// flight as that heartbeat's ack.
	PromotionIsAck bool
	// OneReadOneMessage assumes every read returns exactly one whole frame.
	OneReadOneMessage bool
	// FixedHalfLease heartbeats every lease/2, ignoring base interval and RTT.
	FixedHalfLease bool
	// TimeoutFromReply measures the client timeout from the last reply
	// instead of the send of the last acknowledged request.
	TimeoutFromReply bool
	// SkipNameValidation sends names without checking them first.
	SkipNameValidation bool
	// ReleaseWithoutWait reports released as soon as it has closed,
	// before the server has let the lock go.
	ReleaseWithoutWait bool
}

// command is one line from the runner.
type command struct {
	Cmd              string   `json:"cmd"`
	ID               string   `json:"id"`
	Servers          []string `json:"servers"`
	Name             *string  `json:"name"`
	NameHex          *string  `json:"name_hex"`
	LeaseMS          *uint64  `json:"lease_ms"`
	Mode             string   `json:"mode"`
	TimeoutMS        *int64   `json:"timeout_ms"`
	ConnectTimeoutMS *int64   `json:"connect_timeout_ms"`
	TLS              *tlsCmd  `json:"tls"`
}

// tlsCmd is the tls object of an acquire command.
type tlsCmd struct {
	CAFile     string  `json:"ca_file"`
	CertFile   string  `json:"cert_file"`
	KeyFile    string  `json:"key_file"`
	ServerName *string `json:"server_name"`
}

// config builds the TLS configuration; an empty server name is filled in
// per address by the dialer.
func (t *tlsCmd) config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, err
	}
	if !cfg.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", t.CAFile)
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.ServerName != nil {
		cfg.ServerName = *t.ServerName
	}
	return cfg, nil
}

// out serialises event lines on stdout.
type out struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *out) emit(ev map[string]any) {
	b, _ := json.Marshal(ev)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.w.Write(append(b, '\n'))
	o.w.Flush()
}

// Main runs the driver on stdin/stdout until quit or EOF.
func Main(client string, bugs Bugs) {
	o := &out{w: bufio.NewWriter(os.Stdout)}
	o.emit(map[string]any{"event": "ready", "client": client,
		"capabilities": []string{"cancel", "invalid_utf8_names", "tls"}})
	claims := map[string]*claim{}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			o.emit(map[string]any{"event": "driver_error", "message": err.Error()})
			continue
		}
		switch c.Cmd {
		case "acquire":
			cl, err := newClaim(c, bugs, o)
			if err != nil {
				o.emit(map[string]any{"event": "driver_error", "message": err.Error()})
				continue
			}
			claims[c.ID] = cl
			go cl.run()
		case "release", "cancel":
			cl := claims[c.ID]
			if cl == nil {
				o.emit(map[string]any{"event": "driver_error", "message": "unknown id " + c.ID})
				continue
			}
			cl.stop(c.Cmd)
		case "quit":
			closeAll(claims)
			return
		default:
			o.emit(map[string]any{"event": "driver_error", "message": "unknown command " + c.Cmd})
		}
	}
	closeAll(claims)
}

func closeAll(claims map[string]*claim) {
	for _, cl := range claims {
		cl.stop("quit")
	}
}

// name returns the command's lock name as bytes.
func (c command) name() (string, error) {
	if c.NameHex != nil {
		b, err := hex.DecodeString(*c.NameHex)
		return string(b), err
	}
	if c.Name == nil {
		return "", fmt.Errorf("acquire without name")
	}
	return *c.Name, nil
}
