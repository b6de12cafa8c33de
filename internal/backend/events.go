package backend

import "sync"

// EventQueue is an unbounded FIFO in front of a backend's Events channel:
// watchers push without ever blocking, and one goroutine hands events to the
// reader in order. Close drops what was not delivered and closes the channel.
type EventQueue struct {
	mu     sync.Mutex
	items  []Event
	closed bool

	wake chan struct{} // capacity 1: "items may be non-empty"
	quit chan struct{}
	done chan struct{}
	out  chan Event
}

// Out is the channel the events are delivered on (a backend's Events).
func (q *EventQueue) Out() <-chan Event { return q.out }

// NewEventQueue starts a queue.
func NewEventQueue() *EventQueue {
	q := &EventQueue{
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		out:  make(chan Event, 64),
	}
	go q.run()
	return q
}

// Push appends e; it never blocks. After Close it drops e.
func (q *EventQueue) Push(e Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.items = append(q.items, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *EventQueue) run() {
	defer close(q.done)
	defer close(q.out)
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.items = nil // let a drained burst's array go
			q.mu.Unlock()
			select {
			case <-q.wake:
				continue
			case <-q.quit:
				return
			}
		}
		e := q.items[0]
		q.items[0] = Event{}
		q.items = q.items[1:]
		q.mu.Unlock()
		select {
		case q.out <- e:
		case <-q.quit:
			return
		}
	}
}

// Close stops delivery and closes the channel; it is idempotent.
func (q *EventQueue) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.done
		return
	}
	q.closed = true
	q.items = nil
	q.mu.Unlock()
	close(q.quit)
	<-q.done
}
