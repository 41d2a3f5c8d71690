package client

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/monolock/monolock/go/internal/testspec"
)

func TestReleaseWaitMatchesSpec(t *testing.T) {
	var c struct {
		Release struct {
			MaxWaitMS int64 `json:"max_wait_ms"`
		} `json:"release"`
	}
	testspec.Load(t, "constants.json", &c)
	assert.Equal(t, time.Duration(c.Release.MaxWaitMS)*time.Millisecond, releaseWait)
}
