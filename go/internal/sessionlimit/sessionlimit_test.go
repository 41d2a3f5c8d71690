package sessionlimit

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// An IPv6 client counts by its /64 (by default): a host that picks a new
// address of its prefix for every connection is still one client. IPv4
// addresses, and IPv6 ones at a prefix of 128, count one by one.
func TestClientKeyCountsIPv6ByPrefix(t *testing.T) {
	key := func(ip string, bits int) string { return ClientKey(netip.MustParseAddr(ip), bits).String() }
	assert.Equal(t, key("2001:db8:1:2::1", 64), key("2001:db8:1:2:ffff:ffff:ffff:ffff", 64))
	assert.NotEqual(t, key("2001:db8:1:2::1", 64), key("2001:db8:1:3::1", 64))
	assert.Equal(t, "2001:db8:1:2::", key("2001:db8:1:2::1", DefaultIPv6Prefix))
	assert.Equal(t, key("2001:db8::1", 56), key("2001:db8:0:ff::1", 56))
	assert.NotEqual(t, key("2001:db8:1:2::1", 128), key("2001:db8:1:2::2", 128))
	assert.Equal(t, "192.0.2.7", key("192.0.2.7", 64), "IPv4 is never masked")
	assert.Equal(t, "::1", key("::1", 128))
}

func addr(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// Places are counted in total and per address, and each given back once.
func TestLimits(t *testing.T) {
	l := New(3, 2, DefaultIPv6Prefix)
	a1, why := l.Take(addr("192.0.2.1:1000"))
	assert.Empty(t, why)
	a2, _ := l.Take(addr("192.0.2.1:1001"))
	_, why = l.Take(addr("192.0.2.1:1002"))
	assert.Equal(t, RefusedPerAddr, why, "a third place for one address")
	b, why := l.Take(addr("[::ffff:192.0.2.2]:1000"))
	assert.Empty(t, why)
	_, why = l.Take(addr("192.0.2.3:1000"))
	assert.Equal(t, RefusedTotal, why, "a fourth place in all")

	a1.Leave()
	a1.Leave() // a second Leave gives back nothing more
	var none Place
	none.Leave()
	_, why = l.Take(addr("192.0.2.1:1003"))
	assert.Empty(t, why, "a1's place is free again, and only one")
	_, why = l.Take(addr("192.0.2.3:1000"))
	assert.Equal(t, RefusedTotal, why)
	a2.Leave()
	b.Leave()
	assert.Equal(t, 1, l.taken)
	assert.Equal(t, map[netip.Addr]int{netip.MustParseAddr("192.0.2.1"): 1}, l.byAddr)
}
