package systems

import (
	"context"
	"crypto/tls"
	"testing"
	"time"
)

// Resumption off is a clone of the configuration with session tickets
// disabled: the configuration given stays as it was.
func TestNoResumption(t *testing.T) {
	cfg := &tls.Config{ServerName: "127.0.0.1"}
	off := NoResumption(cfg)
	if !off.SessionTicketsDisabled || cfg.SessionTicketsDisabled || off.ServerName != cfg.ServerName {
		t.Errorf("NoResumption: got %+v from %+v", off, cfg)
	}
}

// A TLS system without a TLS configuration is refused when it is opened,
// not at its first claim; the plain ones need none.
func TestTLSSystemsNeedAConfiguration(t *testing.T) {
	for _, name := range []string{MonolockTLS, MonolockTLSNoResume} {
		if _, err := OpenMonolockNamed(name, "127.0.0.1:1", Options{}); err == nil {
			t.Errorf("%s opened without a TLS configuration", name)
		}
	}
	if _, err := OpenMonolockSessionNamed(MonolockSessionTLS, "127.0.0.1:1", Options{}); err == nil {
		t.Errorf("%s opened without a TLS configuration", MonolockSessionTLS)
	}
	for _, name := range []string{MonolockTLS, MonolockTLSNoResume} {
		sys, err := OpenMonolockNamed(name, "127.0.0.1:1", Options{TLS: &tls.Config{}})
		if err != nil || sys.Name() != name {
			t.Errorf("%s: %v, named %q", name, err, sys.Name())
		}
	}
	sys, err := OpenMonolockSession("127.0.0.1:1", Options{Lease: time.Second})
	if err != nil || sys.Name() != MonolockSession {
		t.Fatalf("monolock-session: %v", err)
	}
	w, err := sys.Worker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
}

// The workloads each system is in: the TLS systems and the floors in the
// throughput workload alone, monolock-session in the handoff too.
func TestWorkloadsOfSystems(t *testing.T) {
	for _, c := range []struct {
		name                string
		handoff, tls, local bool
	}{
		{Monolock, true, false, true},
		{MonolockSession, true, false, true},
		{MonolockTLS, false, true, true},
		{MonolockTLSNoResume, false, true, true},
		{MonolockSessionTLS, false, true, true},
		{MonolockSessionBare, false, false, true},
		{SessionFloor, false, false, false},
		{Postgres, true, false, false},
	} {
		if Handoff(c.name) != c.handoff || TLS(c.name) != c.tls || Local(c.name) != c.local {
			t.Errorf("%s: handoff %v tls %v local %v, want %v %v %v", c.name, Handoff(c.name), TLS(c.name), Local(c.name), c.handoff, c.tls, c.local)
		}
	}
}
