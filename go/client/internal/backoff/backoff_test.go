package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
)

func TestPolicyMatchesSpec(t *testing.T) {
	var c struct {
		Retry struct {
			Initial    float64 `json:"initial_ms"`
			Max        float64 `json:"max_ms"`
			Multiplier float64 `json:"multiplier"`
		} `json:"retry"`
	}
	testspec.Load(t, "constants.json", &c)
	require.Equal(t, c.Retry.Initial, float64(Initial/time.Millisecond))
	require.Equal(t, c.Retry.Max, float64(Max/time.Millisecond))
	require.Equal(t, c.Retry.Multiplier, float64(Multiplier))
}

func TestCeilingDoublesToMax(t *testing.T) {
	want := []time.Duration{50, 100, 200, 400, 800, 1600, 2000, 2000}
	for n, w := range want {
		require.Equal(t, w*time.Millisecond, Ceiling(n), "attempt %d", n)
	}
	require.Equal(t, Max, Ceiling(1000))
}

func TestEqualJitterBounds(t *testing.T) {
	lo := &Backoff{rand: func() float64 { return 0 }}
	hi := &Backoff{rand: func() float64 { return 0.999999 }}
	for n := 0; n < 8; n++ {
		c := Ceiling(n)
		require.Equal(t, c/2, lo.Next())
		got := hi.Next()
		require.LessOrEqual(t, got, c)
		require.Greater(t, got, c*99/100)
	}
	var b Backoff // real randomness stays inside the bounds too
	for n := 0; n < 20; n++ {
		c := Ceiling(n)
		d := b.Next()
		require.GreaterOrEqual(t, d, c/2)
		require.LessOrEqual(t, d, c)
	}
	b.Reset()
	require.LessOrEqual(t, b.Next(), Initial)
}
