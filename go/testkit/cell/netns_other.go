//go:build !linux

package cell

import (
	"context"
	"errors"
	"net"
)

// netnsDialer: network namespaces exist on Linux only.
func netnsDialer(name string) func(context.Context, string) (net.Conn, error) {
	return func(context.Context, string) (net.Conn, error) {
		return nil, errors.New("network namespace " + name + ": Linux only")
	}
}
