package admin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// justBelow leaves no lock name between it and the name, so a page that
// starts after it starts at the name.
func TestJustBelow(t *testing.T) {
	for _, name := range []string{"a", "deploy/web", "x\x00", "\x00", "é", strings.Repeat("z", protocol.MaxNameLen)} {
		below := justBelow(name)
		assert.Less(t, below, name, "%q", name)
		assert.LessOrEqual(t, len(below), protocol.MaxNameLen, "%q", name)
		for _, between := range []string{name[:len(name)-1], name[:len(name)-1] + "\xff", below + "\x00", name + "\x00"} {
			if len(between) <= protocol.MaxNameLen {
				assert.False(t, below < between && between < name, "%q lies between %q and %q", between, below, name)
			}
		}
	}
	assert.Equal(t, "", justBelow(""))
	assert.Equal(t, "x", justBelow("x\x00"))
}
