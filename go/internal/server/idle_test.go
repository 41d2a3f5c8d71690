package server

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// rawClient is a blocking socket with no Go runtime state (no netpoll
// descriptor, no goroutine), so the process's memory growth is the
// server's alone.
type rawClient int

func rawDial(t *testing.T, addr string) rawClient {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Connect(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}))
	tv := syscall.NsecToTimeval(int64(replyTimeout))
	require.NoError(t, syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv))
	return rawClient(fd)
}

// roundTrip writes b and reads one reply, which must be ACQUIRED: a free
// lock is granted at once, also at a token block boundary.
func (c rawClient) roundTrip(t *testing.T, b []byte) {
	t.Helper()
	_, err := syscall.Write(int(c), b)
	require.NoError(t, err)
	var reply [9]byte
	n, err := syscall.Read(int(c), reply[:1])
	require.NoError(t, err)
	require.Equal(t, 1, n, "closed")
	require.Equal(t, protocol.MsgAcquired, reply[0])
	for got := 1; got < len(reply); {
		n, err := syscall.Read(int(c), reply[got:])
		require.NoError(t, err)
		require.Positive(t, n, "closed")
		got += n
	}
}

// An idle session (a holder that heartbeats) keeps one goroutine with the
// minimum stack, 2 KiB, more than anything else it costs the server (see
// bench/profile/idlesessions for the whole process's growth): a goroutine
// that ever needed more keeps 4 KiB for good, so the heartbeat reader must
// start with the minimum and never outgrow it. This fails if the heartbeat
// path gets deeper, or if the handshake's reader stays on for the
// heartbeats.
func TestIdleSessionStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector inflates every stack")
	}
	const n = 1500 // per phase
	raiseFileLimit(t, 4*n+256)
	srv := startServer(t, Config{})
	hold := func(phase int) {
		for i := range n {
			c := rawDial(t, srv.addr)
			acq, err := protocol.AppendAcquire(nil, fmt.Sprintf("idle-%d-%d", phase, i), 60000)
			require.NoError(t, err)
			c.roundTrip(t, acq)
			c.roundTrip(t, []byte{protocol.MsgHeartbeat})
		}
	}
	// A first batch, so that the runtime sizes new goroutines' stacks by
	// what idle readers use (it starts them at the average it saw at the
	// last collection, which the test's own goroutines would dominate);
	// then the batch measured.
	hold(0)
	before := memStats()
	goroutines := runtime.NumGoroutine()
	hold(1)
	after := memStats()

	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / n }
	stack := per(before.StackInuse, after.StackInuse)
	t.Logf("per idle session: %.0f B stack, %.0f B heap, %.0f B runtime (netpoll); %.2f goroutines",
		stack, per(before.HeapAlloc, after.HeapAlloc), per(before.OtherSys, after.OtherSys),
		float64(runtime.NumGoroutine()-goroutines)/n)
	assert.InDelta(t, goroutines+n, runtime.NumGoroutine(), 8, "one goroutine per session")
	assert.Less(t, stack, 2048+512.0, "idle sessions' readers have more than the minimum stack")
}

// A heartbeat's reply allocates nothing (the raw client does not either).
func TestHeartbeatDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	srv := startServer(t, Config{})
	c := dial(t, srv.addr)
	c.acquire("alloc", 60000)
	c.expectAcquired()
	require.NoError(t, c.conn.SetDeadline(time.Now().Add(time.Minute)))
	hb := []byte{protocol.MsgHeartbeat}
	reply := make([]byte, 9)
	var conn net.Conn = c.conn
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := conn.Write(hb); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conn, reply); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}
