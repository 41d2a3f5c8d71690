// Package backoff spaces the attempts of a waiting acquisition: exponential
// growth with "equal jitter", so that many clients that lost the same server
// do not come back in lockstep.
package backoff

import (
	"math/rand/v2"
	"time"

	"github.com/monolock/monolock/go/internal/spec"
)

// The retry policy of spec/constants.json ("retry").
const (
	Initial    = spec.RetryInitialMS * time.Millisecond
	Max        = spec.RetryMaxMS * time.Millisecond
	Multiplier = spec.RetryMultiplier
)

// Backoff yields the delays before successive retries. The zero value uses the
// spec's policy; it is not safe for concurrent use.
type Backoff struct {
	attempt int
	// rand returns a float in [0, 1); tests replace it.
	rand func() float64
}

// Ceiling returns the upper bound of the n-th delay (n from 0):
// min(Max, Initial * Multiplier^n).
func Ceiling(n int) time.Duration {
	d := Initial
	for i := 0; i < n && d < Max; i++ {
		d *= Multiplier
	}
	return min(d, Max)
}

// Next returns the delay before the next attempt, uniformly drawn from
// [ceiling/2, ceiling], and advances the attempt count.
func (b *Backoff) Next() time.Duration {
	r := rand.Float64
	if b.rand != nil {
		r = b.rand
	}
	c := Ceiling(b.attempt)
	b.attempt++
	half := c / 2
	return half + time.Duration(r()*float64(c-half))
}

// Reset starts the sequence again from Initial, after an attempt that got far
// enough to show the server is healthy.
func (b *Backoff) Reset() { b.attempt = 0 }
