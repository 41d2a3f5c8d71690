package report

import (
	"bytes"
	"fmt"

	"github.com/monolock/monolock/bench/internal/systems"
)

// sessionFloorTargets are the targets against the session floor: a claim
// on an open session at least 0.9× the floor's cycles/s, with the bare
// client (the server's share) and with the Go client (what a user gets).
var sessionFloorTargets = []floorTarget{
	{systems.MonolockSessionBare, 0.9, "monolock session with the bare client ≥ 0.9× the session floor (uncontended cycles/s, every worker count)"},
	{systems.MonolockSession, 0.9, "monolock session with the Go client ≥ 0.9× the session floor (uncontended cycles/s, every worker count)"},
}

// writeSessionFloorText says what the session floor and its rows are.
func writeSessionFloorText(b *bytes.Buffer) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("*session floor* is the same for a claim on a session (protocol version 4), where one connection carries many claims: two exchanges on a connection already open, OPEN(ACQUIRE) → STREAM(ACQUIRED) and RELEASE → RELEASED. ")
	p("The same `bench floor` process serves it when a connection starts with SESSION: it answers SESSION_OK, then every OPEN with STREAM(ACQUIRED) and an increasing token, every RELEASE with RELEASED and every HEARTBEAT with ALIVE, reading whatever has arrived and answering it in one write, with no lock table, lease or stream bookkeeping. ")
	p("Its *bare session client* opens one session per worker on its first claim and keeps it; a claim is one OPEN frame and a read of the 14-byte STREAM(ACQUIRED), a release one RELEASE and a read of the 5-byte RELEASED. ")
	p("No connection is set up or torn down per claim, so the session floor is far above the tcp floor, and it is what the peers' pooled recipes compete with. ")
	p("The × session floor column gives every row as a fraction of it at the same worker count; *monolock serve, bare client, a session per worker* is the bare session client against the real server (the gap is the server's), *monolock serve, Go client, a session per worker* the canonical Go client's `Client.Session` and `Session.Acquire`.\n\n")
}
