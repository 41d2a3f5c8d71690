package server

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// BenchmarkHeartbeat measures one HEARTBEAT round trip over loopback TCP:
// the server's whole per-message path (read, lease deadline, reply under the
// session's write lock, write). allocs/op counts the whole process, the raw
// client included, so 0 means the server path does not allocate.
func BenchmarkHeartbeat(b *testing.B) {
	srv := startServer(b, Config{})

	conn, err := net.Dial("tcp", srv.addr)
	require.NoError(b, err)
	acq, err := protocol.AppendAcquire(nil, "bench", 60000)
	require.NoError(b, err)
	_, err = conn.Write(acq)
	require.NoError(b, err)
	reply := make([]byte, 9)
	_, err = io.ReadFull(conn, reply)
	require.NoError(b, err)
	hb := []byte{0x02}
	require.NoError(b, conn.SetDeadline(time.Now().Add(time.Minute)))

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := conn.Write(hb); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, reply); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	conn.Close()
}
