package acl

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/monolock/monolock/go/internal/peer"
)

// Authorizer applies the ACL in a file to lock sessions and watches and can
// reload it while the server runs. It implements server.Authorizer, and
// claims.Watcher for watches.
type Authorizer struct {
	path  string
	rules atomic.Pointer[Rules]
}

// Load reads the ACL file at path.
func Load(path string) (*Authorizer, error) {
	rs, err := ParseFile(path)
	if err != nil {
		return nil, err
	}
	a := &Authorizer{path: path}
	a.rules.Store(rs)
	return a, nil
}

// Reload reads the file again. On success the new rules decide every ACQUIRE
// and WATCH from now on (sessions already holding, waiting or watching are
// not re-checked); on error the rules in force stay and the error says why.
func (a *Authorizer) Reload() (*Rules, error) {
	rs, err := ParseFile(a.path)
	if err != nil {
		return nil, err
	}
	a.rules.Store(rs)
	return rs, nil
}

// Path returns the file the rules come from.
func (a *Authorizer) Path() string { return a.path }

// Rules returns the rules in force.
func (a *Authorizer) Rules() *Rules { return a.rules.Load() }

// Authorize allows conn's client to take name if the rules in force do. The
// error text becomes the reason of ERROR 0x18.
func (a *Authorizer) Authorize(conn net.Conn, name string) error {
	ids := peer.Identities(conn)
	if a.rules.Load().Allows(ids, name) {
		return nil
	}
	return refusal(ids, "take")
}

// AuthorizeWatch allows conn's client to watch name if the rules in force
// do: by a watch: pattern or by one that allows taking it. The error text
// becomes the reason of ERROR 0x18.
func (a *Authorizer) AuthorizeWatch(conn net.Conn, name string) error {
	ids := peer.Identities(conn)
	if a.rules.Load().AllowsWatch(ids, name) {
		return nil
	}
	return refusal(ids, "watch")
}

// refusal says that no rule lets ids do what (take, watch) with the lock.
func refusal(ids []string, what string) error {
	// Every identity the client has, since a rule may name any of them;
	// within the reason's 255 bytes with "not authorized for lock: " in
	// front. The lock's name is the client's to say: it knows it.
	return fmt.Errorf("no ACL rule lets %s %s it", clip(strings.Join(ids, ", "), 200), what)
}

// clip keeps reasons within the protocol's reason length.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
