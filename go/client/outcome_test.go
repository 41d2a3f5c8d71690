package client

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/client/internal/retry"
	"github.com/monolock/monolock/go/internal/testspec"
	"github.com/monolock/monolock/go/pkg/protocol"
)

// Every way an attempt ends, sorted without a socket.
func TestAttemptOutcome(t *testing.T) {
	refusedCert := &connectError{addr: "a:1", err: errors.New("x509"), tls: true, cert: serverCertRefused}
	for _, c := range []struct {
		name    string
		err     error
		reached bool
		want    retry.Outcome
	}{
		{"granted", nil, true, retry.Granted},
		{"no connection", &connectError{addr: "a:1", err: io.EOF}, false, retry.ConnectFailed},
		{"a TLS handshake that failed, not on a certificate", &connectError{addr: "a:1", err: io.EOF, tls: true}, false, retry.ConnectFailed},
		{"a certificate problem", refusedCert, false, retry.NotMonolock},
		{"a certificate problem, wrapped", fmt.Errorf("attempt: %w", refusedCert), false, retry.NotMonolock},
		{"the admin port", &notMonolockError{addr: "a:1", sent: `"HTTP/1.1"`}, true, retry.NotMonolock},
		{"busy", ErrBusy, true, retry.Busy},
		{"a temporary server error", &ServerError{Code: protocol.ErrShuttingDown.Code}, true, retry.Requeue},
		{"a passive server of an HA cell", &ServerError{Code: protocol.ErrNotActive.Code, Reason: "b:1"}, true, retry.NotActive},
		{"an unknown temporary code", &ServerError{Code: 0x0f}, true, retry.Requeue},
		{"a terminal server error", &ServerError{Code: protocol.ErrNotAuthorized.Code}, true, retry.Terminal},
		{"an unknown terminal code", &ServerError{Code: 0x7f}, true, retry.Terminal},
		{"the server ended the connection", ErrServerEnded, true, retry.Requeue},
		{"the client timeout while waiting", ErrClientTimeout, true, retry.Requeue},
		{"no shared locks on that server", &unsupportedError{addr: "a:1", feature: sharedUnsupported, cause: &ServerError{Code: protocol.ErrUnsupportedVersion.Code}}, true, retry.Terminal},
	} {
		assert.Equal(t, c.want, attemptOutcome(c.err, c.reached), c.name)
	}
}

// Which server of the list a passive server's ERROR 0x03 names
// (spec/vectors/retry.json, leader_names).
func TestLeaderNameVectors(t *testing.T) {
	var vec struct {
		LeaderNames struct {
			Servers []string `json:"servers"`
			Cases   []struct {
				Reason string `json:"reason"`
				Index  *int   `json:"index"`
			} `json:"cases"`
		} `json:"leader_names"`
	}
	testspec.Load(t, "vectors/retry.json", &vec)
	c, err := New(WithServers(vec.LeaderNames.Servers...))
	require.NoError(t, err)
	require.NotEmpty(t, vec.LeaderNames.Cases)
	for _, tc := range vec.LeaderNames.Cases {
		want := -1
		if tc.Index != nil {
			want = *tc.Index
		}
		assert.Equal(t, want, leaderIndex(c.cfg.servers, tc.Reason), "reason %q", tc.Reason)
	}
}
