package client

// What the client says when the input or the server is not what it should
// be (spec/constants.json, client_defaults).

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// requireOnePrefix checks the rule that every message starts with
// "monolock: " exactly once.
func requireOnePrefix(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	msg := err.Error()
	assert.True(t, strings.HasPrefix(msg, "monolock: "), "no prefix: %s", msg)
	assert.Equal(t, 1, strings.Count(msg, "monolock:"), "prefix repeated: %s", msg)
}

func TestServerAddressVectors(t *testing.T) {
	var vec struct {
		OK []struct {
			In   string `json:"in"`
			Host string `json:"host"`
			Port int    `json:"port"`
		} `json:"ok"`
		Error    []string `json:"error"`
		Messages []struct {
			In      string `json:"in"`
			Message string `json:"message"`
		} `json:"messages"`
	}
	testspec.Load(t, "vectors/addresses.json", &vec)
	require.NotEmpty(t, vec.OK)
	require.NotEmpty(t, vec.Error)
	require.NotEmpty(t, vec.Messages)
	// The same text in every client: a URL scheme, an empty host.
	for _, v := range vec.Messages {
		_, err := New(WithServers(v.In))
		require.Error(t, err, "%q was accepted", v.In)
		assert.Equal(t, v.Message, err.Error())
	}
	for _, v := range vec.OK {
		c, err := New(WithServers(v.In))
		require.NoError(t, err, "%q", v.In)
		assert.Equal(t, []string{net.JoinHostPort(v.Host, strconv.Itoa(v.Port))}, c.cfg.servers, "%q", v.In)
	}
	for _, in := range vec.Error {
		_, err := New(WithServers("127.0.0.1:7117", in))
		require.Error(t, err, "%q was accepted", in)
		assert.Contains(t, err.Error(), strconv.Quote(in), "the message must name the address")
		requireOnePrefix(t, err)
	}
	c, err := New()
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7117"}, c.cfg.servers, "the default server")
}

// A bare host is dialled on port 7117: the real server answers there.
func TestBareHostDialsDefaultPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:7117")
	if err != nil {
		t.Skipf("port 7117 is taken on this machine: %v", err)
	}
	srv := newFakeServerOn(t, ln)
	c := newClient(t, "127.0.0.1", time.Second)
	res := acquireAsync(ctxTimeout(t, wait), c, "bare", true)
	conn := srv.accept()
	conn.expectAcquire("bare", time.Second)
	conn.send(acquired(5))
	r := result(t, res)
	require.NoError(t, r.err)
	require.NoError(t, r.lock.Release())
}

func TestLeaseRuleMessage(t *testing.T) {
	for _, d := range []time.Duration{1500 * time.Microsecond, 0, -time.Second, (1 << 32) * time.Millisecond} {
		_, err := New(WithLease(d))
		require.ErrorIs(t, err, protocol.ErrInvalidLease)
		var pe *protocol.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, uint8(0x17), pe.Code)
		assert.Contains(t, err.Error(), "lease must be a whole number of milliseconds from 1 ms to 4294967295 ms")
		assert.Contains(t, err.Error(), d.String(), "the message gives the value")
		requireOnePrefix(t, err)
	}
}

func TestNameTooLongGivesLengthAndLimit(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), time.Second)
	name := strings.Repeat("n", 300)
	_, err := c.TryAcquire(context.Background(), name)
	require.ErrorIs(t, err, protocol.ErrNameTooLong)
	assert.Contains(t, err.Error(), "(300 bytes, the limit is 255)")
	assert.NotContains(t, err.Error(), strings.Repeat("n", 41), "the name is echoed")
	requireOnePrefix(t, err)
	srv.noConnection(100 * time.Millisecond)
}

func TestLostByAdministratorOnePrefix(t *testing.T) {
	srv := newFakeServer(t)
	c := newClient(t, srv.addr(), 10*time.Second)
	lock, conn, _ := grant(t, srv, c, "kicked", 9)
	conn.send(errFrame(0x02, "closed by administrator"))
	lockDone(t, lock)
	require.ErrorIs(t, lock.Err(), ErrLockLost)
	require.ErrorIs(t, lock.Err(), protocol.ErrAdminClosed)
	assert.Equal(t, "monolock: lock lost: closed by administrator (0x02)", lock.Err().Error())
	require.NoError(t, lock.Release())
}

func TestTLSToPlaintextServer(t *testing.T) {
	srv := startRealServer(t)
	c := newClient(t, srv.Addr, time.Second, WithTLS(&tls.Config{InsecureSkipVerify: true}))
	_, err := c.TryAcquire(context.Background(), "tls")
	require.ErrorIs(t, err, ErrUnavailable)
	assert.Contains(t, err.Error(), "TLS handshake with "+srv.Addr+" failed; the server may not speak TLS")
	requireOnePrefix(t, err)
}

// httpListener answers every connection as an HTTP server answers bytes it
// cannot parse, as the admin port does.
func httpListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

// A wrong port is told apart from a busy lock by ErrUnavailable, whatever
// the port does: refuse, answer in another protocol, or never finish the
// handshake before the deadline.
func TestDeadlineAgainstWrongPortIsUnavailable(t *testing.T) {
	refusing := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	silent := newFakeServer(t) // accepts and never answers the TLS handshake
	for _, tc := range []struct {
		name, addr string
		opts       []Option
		deadline   bool // only the deadline ends the wait
		says       string
	}{
		{"refused", refusing, nil, true, "cannot connect to " + refusing},
		{"http", httpListener(t), nil, false, "does not speak the monolock protocol"},
		{"tls-silent", silent.addr(), []Option{WithTLS(&tls.Config{InsecureSkipVerify: true})}, true, "TLS handshake with " + silent.addr() + " failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.addr, 10*time.Second, tc.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			_, err := c.Acquire(ctx, "wrong-port")
			require.ErrorIs(t, err, ErrUnavailable)
			if tc.deadline {
				require.ErrorIs(t, err, context.DeadlineExceeded)
			} else {
				require.ErrorIs(t, err, ErrProtocol)
				require.NoError(t, ctx.Err(), "not told at once")
			}
			assert.Contains(t, err.Error(), tc.says)
			requireOnePrefix(t, err)
		})
	}
}

// spec/vectors/temporary.json: the temporary flag of client errors that
// carry no ERROR code. An error without a Temporary method is not temporary.
func TestTemporaryVectors(t *testing.T) {
	var vec struct {
		Cases []struct {
			Error     string `json:"error"`
			Temporary bool   `json:"temporary"`
		} `json:"cases"`
	}
	testspec.Load(t, "vectors/temporary.json", &vec)
	require.NotEmpty(t, vec.Cases)
	temporary := func(err error) bool {
		var tmp interface{ Temporary() bool }
		return errors.As(err, &tmp) && tmp.Temporary()
	}
	for _, v := range vec.Cases {
		var err error
		switch v.Error {
		case "not_monolock":
			err = &notMonolockError{addr: "127.0.0.1:7118", sent: "HTTP/1.1 400"}
			require.ErrorIs(t, err, ErrProtocol)
		case "config":
			_, err = New(WithServers("http://127.0.0.1:7117"))
			require.Error(t, err)
		default:
			t.Fatalf("spec/vectors/temporary.json: unknown error %q", v.Error)
		}
		assert.Equal(t, v.Temporary, temporary(err), "%s: %v", v.Error, err)
	}
}

// The client timeout in a loss message is 0.8 x lease exactly, never a
// float's rounding or an exponent.
func TestClientTimeoutMessage(t *testing.T) {
	for lease, want := range map[uint32]string{
		2000:       "no reply from the server within 1600 ms (0.8 x lease of 2000 ms)",
		1001:       "no reply from the server within 800.8 ms (0.8 x lease of 1001 ms)",
		1:          "no reply from the server within 0.8 ms (0.8 x lease of 1 ms)",
		4294967295: "no reply from the server within 3435973836 ms (0.8 x lease of 4294967295 ms)",
	} {
		err := &clientTimeoutError{leaseMS: lease}
		assert.Equal(t, "monolock: "+want, err.Error())
		require.ErrorIs(t, err, ErrClientTimeout)
	}
}

// The messages every client gives in the same words: a server's ERROR and
// an acquisition whose deadline passed (spec/vectors/messages.json).
func TestMessageVectors(t *testing.T) {
	var vec struct {
		ServerErrors []struct {
			Code    uint8  `json:"code"`
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"server_errors"`
		AcquireTimeouts []struct {
			Name       string `json:"name"`
			LastCode   *uint8 `json:"last_code"`
			LastReason string `json:"last_reason"`
			Message    string `json:"message"`
		} `json:"acquire_timeouts"`
		Busy []struct {
			Name    string `json:"name"`
			Shared  bool   `json:"shared"`
			Limit   uint16 `json:"limit"`
			Message string `json:"message"`
		} `json:"busy"`
	}
	testspec.Load(t, "vectors/messages.json", &vec)
	require.NotEmpty(t, vec.ServerErrors)
	require.NotEmpty(t, vec.AcquireTimeouts)
	require.NotEmpty(t, vec.Busy)
	for _, v := range vec.Busy {
		err := &busyError{name: v.Name, shared: v.Shared, limit: v.Limit}
		assert.Equal(t, v.Message, err.Error())
		assert.ErrorIs(t, err, ErrBusy)
	}
	for _, v := range vec.ServerErrors {
		assert.Equal(t, v.Message, (&ServerError{Code: v.Code, Reason: v.Reason}).Error())
	}
	for _, v := range vec.AcquireTimeouts {
		var last error
		if v.LastCode != nil {
			last = &ServerError{Code: *v.LastCode, Reason: v.LastReason}
		}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now())
		err := interrupted(v.Name, ctx, last)
		cancel()
		assert.Equal(t, v.Message, err.Error())
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		if last != nil {
			assert.ErrorIs(t, err, last)
		}
	}
}
