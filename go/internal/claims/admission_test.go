package claims

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/monolock/monolock/go/pkg/protocol"
)

// The admission of a claim, decided without a socket: each rule, and which
// refusal wins when several apply (the protocol's order).
func TestAdmission(t *testing.T) {
	acl := errors.New("no ACL rule lets anonymous take it")
	exclusive := Request{Name: "jobs/x", Lease: 10 * time.Second}
	shared2 := Request{Name: "pool", Lease: 10 * time.Second, Shared: true, Limit: 2}
	open := admissionInputs{active: true}
	for _, c := range []struct {
		name   string
		req    Request
		in     admissionInputs
		code   *protocol.Error // nil: admitted
		reason string
	}{
		{"an exclusive claim", exclusive, open, nil, ""},
		{"a lease at the maximum", exclusive, admissionInputs{active: true, maxLease: 10 * time.Second}, nil, ""},
		{"a lease above the maximum", exclusive, admissionInputs{active: true, maxLease: time.Second},
			protocol.ErrInvalidLease, "lease 10000 ms is above this server's maximum of 1000 ms"},
		{"a passive server that knows the leader", exclusive, admissionInputs{leader: "10.0.0.1:7117"},
			protocol.ErrNotActive, "10.0.0.1:7117"},
		{"a passive server that does not", exclusive, admissionInputs{},
			protocol.ErrNotActive, ""},
		{"the ACL refuses", exclusive, admissionInputs{active: true, acl: acl},
			protocol.ErrNotAuthorized, "not authorized for lock: no ACL rule lets anonymous take it"},
		{"a shared claim on a free name", shared2, open, nil, ""},
		{"a shared claim that agrees", shared2, admissionInputs{active: true, limit: 2, bound: true}, nil, ""},
		{"a shared claim that does not", shared2, admissionInputs{active: true, limit: 3, bound: true},
			protocol.ErrLimitMismatch, "limit 2 differs from the limit 3 of the shared sessions on this lock"},
		{"against no limit", shared2, admissionInputs{active: true, limit: 0, bound: true},
			protocol.ErrLimitMismatch, "limit 2 differs from the limit 0 (none) of the shared sessions on this lock"},
		{"an exclusive claim has no say in the limit", exclusive, admissionInputs{active: true, limit: 3, bound: true}, nil, ""},
		// Precedence: the maximum lease, then the active server, then the
		// ACL, then the limit.
		{"the maximum before the active server", exclusive, admissionInputs{maxLease: time.Second, acl: acl},
			protocol.ErrInvalidLease, "lease 10000 ms is above this server's maximum of 1000 ms"},
		{"the active server before the ACL", exclusive, admissionInputs{acl: acl},
			protocol.ErrNotActive, ""},
		{"the ACL before the limit", shared2, admissionInputs{active: true, acl: acl, limit: 3, bound: true},
			protocol.ErrNotAuthorized, "not authorized for lock: no ACL rule lets anonymous take it"},
	} {
		got := admission(c.req, c.in)
		if c.code == nil {
			assert.Nil(t, got, c.name)
			continue
		}
		if assert.NotNil(t, got, c.name) {
			assert.Equal(t, c.code, got.Code, c.name)
			assert.Equal(t, c.reason, got.Reason, c.name)
		}
	}
}
