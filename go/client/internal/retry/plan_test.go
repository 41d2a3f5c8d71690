package retry

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/monolock/monolock/go/internal/testspec"
)

// Every case of spec/vectors/retry.json.
func TestRetryVectors(t *testing.T) {
	var vec struct {
		Cases []struct {
			Name    string `json:"name"`
			Servers int    `json:"servers"`
			Mode    string `json:"mode"`
			Steps   []struct {
				Expect   string  `json:"expect"`
				Outcome  string  `json:"outcome"`
				QueuedMS float64 `json:"queued_ms"`
				Leader   *int    `json:"leader"`
			} `json:"steps"`
		} `json:"cases"`
	}
	testspec.Load(t, "vectors/retry.json", &vec)
	require.NotEmpty(t, vec.Cases)
	outcomes := map[string]Outcome{"granted": Granted, "connect_failed": ConnectFailed,
		"requeue": Requeue, "terminal": Terminal, "busy": Busy, "not_monolock": NotMonolock}
	for _, tc := range vec.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			p := New(tc.Servers, tc.Mode == "try")
			for i, st := range tc.Steps {
				where := fmt.Sprintf("step %d (%s)", i+1, st.Expect)
				got := p.Next()
				var lo, hi, server int
				switch {
				case st.Expect == "give_up":
					require.Equal(t, GiveUp, got.Kind, where)
					continue
				case scan(st.Expect, "sleep %d..%d", &lo, &hi):
					require.Equal(t, Sleep, got.Kind, where)
					require.GreaterOrEqual(t, got.Delay, time.Duration(lo)*time.Millisecond, where)
					require.LessOrEqual(t, got.Delay, time.Duration(hi)*time.Millisecond, where)
					continue
				case scan(st.Expect, "connect %d", &server):
					require.Equal(t, Connect, got.Kind, where)
					require.Equal(t, server, got.Server, where)
				default:
					t.Fatalf("%s: unknown expectation", where)
				}
				if st.Outcome == "not_active" {
					leader := -1
					if st.Leader != nil {
						leader = *st.Leader
					}
					p.ReportNotActive(leader)
					continue
				}
				o, ok := outcomes[st.Outcome]
				require.True(t, ok, "%s: unknown outcome %q", where, st.Outcome)
				p.Report(o, time.Duration(st.QueuedMS*float64(time.Millisecond)))
			}
		})
	}
}

func scan(s, format string, args ...any) bool {
	n, err := fmt.Sscanf(s, format, args...)
	return err == nil && n == len(args)
}

// The reset threshold is the spec's.
func TestResetAfterQueuedIsTheSpecs(t *testing.T) {
	var c struct {
		Retry struct {
			ResetAfterQueuedMS int64  `json:"reset_after_queued_ms"`
			ServerOrder        string `json:"server_order"`
		} `json:"retry"`
	}
	testspec.Load(t, "constants.json", &c)
	require.Equal(t, ResetAfterQueued, time.Duration(c.Retry.ResetAfterQueuedMS)*time.Millisecond)
	require.Equal(t, "rotate", c.Retry.ServerOrder)
}
