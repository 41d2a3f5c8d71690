//go:build !unix

package client

import "net"

// socketWriter is the unix-only write without waiting; elsewhere every
// frame goes through the session's writer.
type socketWriter struct{}

func newSocketWriter(net.Conn) *socketWriter { return nil }

func (*socketWriter) writeNow([]byte) int { return 0 }
