package client

// Input the client refuses before it sends a byte, with the code the server
// would have sent, and options it refuses when it is built.

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

func TestValidationBeforeAnyByte(t *testing.T) {
	var vec struct {
		ClientInvalid []struct {
			Desc    string `json:"desc"`
			NameHex string `json:"name_hex"`
			LeaseMS int64  `json:"lease_ms"`
			Code    uint8  `json:"code"`
		} `json:"client_invalid"`
	}
	testspec.Load(t, "vectors/frames.json", &vec)
	require.NotEmpty(t, vec.ClientInvalid)
	srv := newFakeServer(t)
	for _, v := range vec.ClientInvalid {
		t.Run(v.Desc, func(t *testing.T) {
			name, err := hex.DecodeString(v.NameHex)
			require.NoError(t, err)
			want := protocol.CodeErr(v.Code)
			require.NotNil(t, want)

			c, err := New(WithServers(srv.addr()), WithLease(time.Duration(v.LeaseMS)*time.Millisecond))
			if err == nil {
				for _, try := range []bool{false, true} {
					var lock *Lock
					if try {
						lock, err = c.TryAcquire(context.Background(), string(name))
					} else {
						lock, err = c.Acquire(context.Background(), string(name))
					}
					require.Nil(t, lock)
					requireCanonical(t, err, want)
				}
				return
			}
			requireCanonical(t, err, want)
		})
	}
	srv.noConnection(100 * time.Millisecond)
}

// requireCanonical checks that err is the canonical protocol error itself,
// with the code and the (terminal) class the server would have sent.
func requireCanonical(t *testing.T, err error, want *protocol.Error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, want.Code, pe.Code)
	require.False(t, pe.Temporary())
}

func TestLeaseMustBeWholeMilliseconds(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond / 2, 1500 * time.Microsecond, (1 << 32) * time.Millisecond} {
		_, err := New(WithLease(d))
		require.ErrorIs(t, err, protocol.ErrInvalidLease, "lease %v", d)
	}
	for _, d := range []time.Duration{time.Millisecond, time.Hour, (1<<32 - 1) * time.Millisecond} {
		c, err := New(WithLease(d))
		require.NoError(t, err, "lease %v", d)
		require.Equal(t, d, c.Lease())
	}
}

func TestOptionErrors(t *testing.T) {
	for _, o := range []Option{WithServers(), WithServers("a:1", ""), WithDialTimeout(0)} {
		_, err := New(o)
		require.Error(t, err)
	}
	c, err := New()
	require.NoError(t, err)
	require.Equal(t, DefaultLease, c.Lease())
	require.Equal(t, []string{DefaultServer}, c.cfg.servers)
}
