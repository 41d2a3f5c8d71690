package client

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/monolock/monolock/go/client/internal/retry"
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
		{"an unknown temporary code", &ServerError{Code: 0x0f}, true, retry.Requeue},
		{"a terminal server error", &ServerError{Code: protocol.ErrNotAuthorized.Code}, true, retry.Terminal},
		{"an unknown terminal code", &ServerError{Code: 0x7f}, true, retry.Terminal},
		{"the server ended the connection", ErrServerEnded, true, retry.Requeue},
		{"the client timeout while waiting", ErrClientTimeout, true, retry.Requeue},
		{"no shared locks on that server", &sharedUnsupportedError{addr: "a:1", cause: &ServerError{Code: protocol.ErrUnsupportedVersion.Code}}, true, retry.Terminal},
	} {
		assert.Equal(t, c.want, attemptOutcome(c.err, c.reached), c.name)
	}
}
