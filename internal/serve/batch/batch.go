// Package batch holds the batching policies of Virga's inference engine as
// pure functions of a model's queue, its latency profile and the time: the
// live engine (with the real clock) and the serving benchmarks and
// simulator (with a virtual one) call the same code.
package batch

import "time"

// Item is one request waiting in a model's queue.
type Item struct {
	Arrived  time.Time
	Deadline time.Time // arrival + the model's objective, or the request's own timeout
	Priority int       // lower goes first; 0 is the default
	Rows     int       // rows along the batch dimension (1 for most requests)
}

// Profile is a loaded model's measured latency: how long one call takes
// for a batch of rows (rows >= 1, at most MaxRows).
type Profile interface {
	Latency(rows int) time.Duration
	// MaxRows is the largest batch the model takes in one call (1 if it
	// does not batch).
	MaxRows() int
}

// Tabled is a Profile that keeps its latencies in a table. The deadline
// policy plans with every batch size's latency: a profile that tables them
// spares it asking each one at every decision.
type Tabled interface {
	Profile
	// LatencyTable returns Latency(r) at index r, for r from 1 to
	// MaxRows() (index 0 unused), and EfficientRows of that table. The
	// caller must not modify the table, and uses it only until the
	// profile changes.
	LatencyTable() (table []time.Duration, efficient int)
}

// Decision is what a policy says to do now with a queue.
type Decision struct {
	// Refuse lists queue positions to answer at once with a refusal
	// (they cannot meet their deadline); they leave the queue first.
	Refuse []int
	// Run lists the queue positions (after nothing was refused: positions
	// in the queue as given) to run together as one batch now; empty means
	// run nothing now.
	Run []int
	// Wake is when to ask again if nothing else happens first (a new
	// request or a batch ending); the zero time means only then.
	Wake time.Time
}

// Policy decides, for one model, what to run and what to refuse. The queue
// is in arrival order; idle is the number of the model's instances free to
// run a batch now (a policy returns an empty Run when it is 0).
type Policy interface {
	Decide(now time.Time, queue []Item, idle int, p Profile) Decision
	// Observe tells the policy how a batch it chose went: its rows, how long
	// it took and how many of its requests missed their deadline.
	Observe(rows int, took time.Duration, late int)
}
