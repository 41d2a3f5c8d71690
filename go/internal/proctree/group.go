//go:build unix

package proctree

import "syscall"

// Group is the process group of a command whose leader is the command
// itself, as its parent sees it. Once the leader is reaped and the group
// is found empty, its id is free for reuse by an unrelated group, which
// must not get our signals: from then on Signal sends nothing.
type Group struct {
	id   int
	gone bool
}

// NewGroup returns the group whose id is the leader's pid.
func NewGroup(leader int) *Group { return &Group{id: leader} }

// Signal sends sig to the group while it exists; leaderReaped tells
// whether its leader has been reaped (until then the id cannot be reused).
// Signal 0 only checks that the group is there.
func (g *Group) Signal(sig syscall.Signal, leaderReaped bool) {
	if g.gone {
		return
	}
	if syscall.Kill(-g.id, sig) == syscall.ESRCH && leaderReaped {
		g.gone = true
	}
}

// Gone reports whether the group was found empty after its leader was
// reaped.
func (g *Group) Gone() bool { return g.gone }
