package slurm

import (
	"sync"

	"github.com/virga-ml/virga/internal/backend"
)

// eventQueue is an unbounded FIFO in front of the Events channel: watchers
// push without ever blocking, and one goroutine hands events to the reader in
// order. close drops what was not delivered and closes the channel.
type eventQueue struct {
	mu     sync.Mutex
	items  []backend.Event
	closed bool

	wake chan struct{} // capacity 1: "items may be non-empty"
	quit chan struct{}
	done chan struct{}
	out  chan backend.Event
}

func newEventQueue() *eventQueue {
	q := &eventQueue{
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
		out:  make(chan backend.Event, 64),
	}
	go q.run()
	return q
}

// push appends e; it never blocks. After close it drops e.
func (q *eventQueue) push(e backend.Event) {
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

func (q *eventQueue) run() {
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
		q.items[0] = backend.Event{}
		q.items = q.items[1:]
		q.mu.Unlock()
		select {
		case q.out <- e:
		case <-q.quit:
			return
		}
	}
}

// close stops delivery and closes the channel; it is idempotent.
func (q *eventQueue) close() {
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
