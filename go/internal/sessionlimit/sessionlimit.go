// Package sessionlimit counts the server's places against its session
// limits: in total (--max-sessions) and per client address
// (--max-sessions-per-addr). A connection takes a place when it is
// accepted; a claim held back after its connection ended takes that
// connection's place over until its hold ends, so a client that resets
// its connections in a loop fills its own limit, not the server's memory.
package sessionlimit

import (
	"net"
	"net/netip"
	"sync"
)

// DefaultIPv6Prefix: an IPv6 client counts by its /64, the block one host
// usually has to pick addresses from.
const DefaultIPv6Prefix = 64

// Reasons a place is refused.
const (
	RefusedTotal   = "max_sessions"
	RefusedPerAddr = "per_address"
)

// Limits counts the places taken. The zero limits mean no limit. It is
// safe for concurrent use.
type Limits struct {
	max, perAddr int
	v6Bits       int

	mu     sync.Mutex
	taken  int
	byAddr map[netip.Addr]int // only while perAddr > 0
}

// New returns limits of max places in total and perAddr per client
// address (0: none), counting an IPv6 address by its first v6Bits bits.
func New(max, perAddr, v6Bits int) *Limits {
	return &Limits{max: max, perAddr: perAddr, v6Bits: v6Bits, byAddr: make(map[netip.Addr]int)}
}

// Place is one place taken. Its zero value holds none; Leave gives a place
// back once.
type Place struct {
	limits *Limits
	key    netip.Addr
}

// Take takes a place for a connection from addr, or returns why it may
// not have one (RefusedTotal or RefusedPerAddr).
func (l *Limits) Take(addr net.Addr) (Place, string) {
	key := ClientKey(RemoteIP(addr), l.v6Bits)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.taken >= l.max {
		return Place{}, RefusedTotal
	}
	if l.perAddr > 0 {
		if l.byAddr[key] >= l.perAddr {
			return Place{}, RefusedPerAddr
		}
		l.byAddr[key]++
	}
	l.taken++
	return Place{limits: l, key: key}, ""
}

// Leave gives the place back; a second call, or one on the zero Place,
// does nothing.
func (p *Place) Leave() {
	l := p.limits
	if l == nil {
		return
	}
	p.limits = nil
	l.mu.Lock()
	defer l.mu.Unlock()
	l.taken--
	if l.perAddr > 0 {
		if l.byAddr[p.key]--; l.byAddr[p.key] <= 0 {
			delete(l.byAddr, p.key)
		}
	}
}

// ClientKey is what the per-address limit counts ip under: an IPv6
// address masked to its first v6Bits bits, an IPv4 address itself.
func ClientKey(ip netip.Addr, v6Bits int) netip.Addr {
	if !ip.Is6() || v6Bits >= 128 {
		return ip
	}
	p, err := ip.WithZone("").Prefix(v6Bits)
	if err != nil {
		return ip
	}
	return p.Addr()
}

// RemoteIP is the client's IP address (IPv4-mapped IPv6 unmapped), or
// the zero Addr for an address that is not IP.
func RemoteIP(addr net.Addr) netip.Addr {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(addr.String())
	return ap.Addr().Unmap()
}
