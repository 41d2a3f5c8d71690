package accepted

import (
	"context"
	"testing"
	"time"
)

func TestQueueHandsOutInOrderAndWaits(t *testing.T) {
	q := New[int]()
	q.Add(1)
	q.Add(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, want := range []int{1, 2} {
		if got, err := q.Next(ctx); err != nil || got != want {
			t.Fatalf("Next = %d, %v; want %d", got, err, want)
		}
	}
	go q.Add(3) // Next waits for it
	if got, err := q.Next(ctx); err != nil || got != 3 {
		t.Fatalf("Next = %d, %v; want 3", got, err)
	}
	if all := q.All(); len(all) != 3 {
		t.Errorf("All = %v", all)
	}

	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if _, err := q.Next(short); err == nil {
		t.Error("Next with nothing left must fail when ctx ends")
	}
}
