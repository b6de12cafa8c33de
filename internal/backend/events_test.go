package backend

import (
	"testing"
	"time"
)

// TestEventQueue: pushes never block, events come out in order, and Close
// drops the rest and closes the channel (twice is fine).
func TestEventQueue(t *testing.T) {
	q := NewEventQueue()
	for i := range 10000 { // far more than the channel holds: Push must not block
		q.Push(Event{AttemptID: int64(i)})
	}
	for i := range 10000 {
		select {
		case e := <-q.Out():
			if e.AttemptID != int64(i) {
				t.Fatalf("event %d is attempt %d", i, e.AttemptID)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d not delivered", i)
		}
	}
	q.Push(Event{AttemptID: 1})
	q.Close()
	q.Close()
	q.Push(Event{AttemptID: 2}) // dropped
	for range q.Out() {
	}
}
