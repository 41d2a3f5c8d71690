package driver

import (
	"context"
	"testing"
	"time"

	"github.com/monolock/monolock/go/testkit/pipe"
)

// StartStream hands every event after ready to the sink, in order, and
// keeps none of them.
func TestStartStreamSendsEventsToSink(t *testing.T) {
	script := `echo '{"event":"ready"}'; read cmd; echo '{"event":"waiting","id":"a"}'; echo '{"event":"acquired","id":"a"}'; read quit`
	got := make(chan Event, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, ready, err := StartStream(ctx, t.TempDir(), []string{"sh", "-c", script}, nil, time.Now(),
		func(e Event) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	if ready.Name != "ready" {
		t.Fatalf("ready event %q", ready.Line)
	}
	if err := p.Send(pipe.Command{Cmd: pipe.Acquire, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"waiting", "acquired"} {
		select {
		case e := <-got:
			if e.Name != want || e.ID != "a" {
				t.Fatalf("got %s, want %s for a", e.Line, want)
			}
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
	}
	if n := len(p.Events()); n != 1 {
		t.Fatalf("history holds %d events, want only ready", n)
	}
	if err := p.Quit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Quit")
	}
}
