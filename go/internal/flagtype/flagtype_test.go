package flagtype

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDurationTakesSecondsOrUnits(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"5": 5 * time.Second, "0.5": 500 * time.Millisecond, "0.0015": 1500 * time.Microsecond,
		"250ms": 250 * time.Millisecond, "1m30s": 90 * time.Second, "-1": -time.Second,
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var d time.Duration
		DurationVar(fs, &d, "wait", time.Hour, "")
		require.NoError(t, fs.Parse([]string{"--wait", in}), in)
		assert.Equal(t, want, d, in)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var d time.Duration
	DurationVar(fs, &d, "wait", time.Hour, "")
	assert.Equal(t, time.Hour, d, "the default")
	assert.ErrorContains(t, fs.Parse([]string{"--wait", "soon"}), `"soon" is not a duration (a number of seconds, or a number with a unit: 1.5s, 250ms, 2m)`)
}
