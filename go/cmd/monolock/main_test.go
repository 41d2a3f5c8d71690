package main

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "-V", "version"} {
		code, stdout, stderr := command(t, nil, arg)
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, "monolock dev\n", stdout, arg)
	}
}

// The admin commands' --timeout takes a bare number as seconds, as every
// duration flag of monolock does.
func TestAdminTimeoutTakesSeconds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the command fails to connect, not to parse

	code, _, stderr := command(t, nil, "locks", "--admin", addr, "--timeout", "5")
	assert.Equal(t, 1, code, stderr)
	assert.NotContains(t, stderr, "invalid value")
	code, _, stderr = command(t, nil, "locks", "--admin", addr, "--timeout", "5x")
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "is not a duration")
}
