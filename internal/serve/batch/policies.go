package batch

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Policies by name, as a model's configuration names them.
const (
	NameNone     = "none"
	NameFixed    = "fixed"
	NameAIMD     = "aimd"
	NameDeadline = "deadline"
)

// New returns a fresh policy of the named kind with its defaults: fixed is
// Triton's dynamic batcher with its defaults (no queue delay, the preferred
// batch size the largest), aimd backs off against objective, deadline is
// Virga's default.
func New(name string, objective time.Duration) (Policy, error) {
	switch name {
	case NameNone:
		return None{}, nil
	case NameFixed:
		return &Fixed{}, nil
	case NameAIMD:
		return &AIMD{Objective: objective}, nil
	case NameDeadline, "":
		return &Deadline{}, nil
	}
	return nil, fmt.Errorf("unknown batching policy %q (want %s, %s, %s or %s)", name, NameNone, NameFixed, NameAIMD, NameDeadline)
}

// refuseOversized returns the positions of requests larger than the most
// rows a batch may hold: no batch can ever run them.
func refuseOversized(queue []Item, maxRows int) []int {
	var out []int
	for i, it := range queue {
		if rowsOf(it) > maxRows {
			out = append(out, i)
		}
	}
	return out
}

// None runs one request at a time, FIFO within priority levels: no batching.
type None struct{}

var _ Policy = None{}

// Decide runs the first request in priority-then-arrival order.
func (None) Decide(now time.Time, queue []Item, idle int, p Profile) Decision {
	d := Decision{Refuse: refuseOversized(queue, p.MaxRows())}
	if idle <= 0 {
		return d
	}
	for _, i := range order(queue) {
		if !slices.Contains(d.Refuse, i) {
			d.Run = []int{i}
			break
		}
	}
	return d
}

// Observe does nothing: None does not learn.
func (None) Observe(int, time.Duration, int) {}

// TimeoutAction is what Fixed does with a request whose queue timeout
// expired, as Triton's queue policy names it.
type TimeoutAction int

const (
	// Reject refuses the request.
	Reject TimeoutAction = iota
	// Delay keeps it, behind the requests of its priority level that have
	// not timed out.
	Delay
)

// Fixed is Triton's dynamic batcher (server docs/user_guide/batcher.md,
// core src/dynamic_batch_scheduler.cc GetDynamicBatch), which batches to
// fixed sizes and delays that do not know each request's deadline. Its zero
// value is Triton's defaults: no queue delay, the preferred batch size the
// largest batch, no queue limit and no timeout.
//
// With an instance free it scans the queue (priority levels in order, FIFO
// within one) accumulating requests up to MaxBatch rows, remembering the
// largest preferred size reached. It runs that preferred batch at once
// unless the oldest request has waited MaxQueueDelay; it runs everything
// accumulated if it cannot grow (the next request would pass MaxBatch), has
// reached the largest preferred size, the delay passed, or the delay is 0;
// otherwise it waits until the oldest request has waited MaxQueueDelay.
type Fixed struct {
	// MaxBatch is max_batch_size; 0 means the profile's MaxRows.
	MaxBatch int
	// Preferred is preferred_batch_size; empty means MaxBatch alone, as
	// Triton fills it in.
	Preferred []int
	// MaxQueueDelay is max_queue_delay_microseconds (default 0: no waiting).
	MaxQueueDelay time.Duration
	// MaxQueueSize is max_queue_size per priority level; 0 means no limit.
	// Requests past it (the latest arrivals) are refused, as Triton refuses
	// them when they are enqueued.
	MaxQueueSize int
	// Timeout is default_timeout_microseconds: a request queued longer is
	// refused (Reject) or delayed (Delay); 0 means no timeout.
	Timeout time.Duration
	// AllowTimeoutOverride: a request's own deadline is its timeout.
	AllowTimeoutOverride bool
	// TimeoutAction is timeout_action.
	TimeoutAction TimeoutAction
}

var _ Policy = (*Fixed)(nil)

// timeoutAt returns when an item's queue timeout expires, and whether it has one.
func (f *Fixed) timeoutAt(it Item) (time.Time, bool) {
	if f.AllowTimeoutOverride && !it.Deadline.IsZero() {
		return it.Deadline, true
	}
	if f.Timeout > 0 {
		return it.Arrived.Add(f.Timeout), true
	}
	return time.Time{}, false
}

// Decide applies the queue policy, then forms Triton's dynamic batch.
func (f *Fixed) Decide(now time.Time, queue []Item, idle int, p Profile) Decision {
	maxBatch := p.MaxRows()
	if f.MaxBatch > 0 {
		maxBatch = min(f.MaxBatch, maxBatch)
	}
	preferred := f.Preferred
	if len(preferred) == 0 {
		preferred = []int{maxBatch}
	}
	maxPreferred := slices.Max(preferred)

	// 1. The queue policy: oversized requests, queue overflow per level,
	// expired timeouts. The rest are ordered by level, and within a level
	// those not timed out before the delayed ones, FIFO within each.
	var d Decision
	perLevel := map[int]int{}
	type entry struct {
		pos     int
		delayed bool
	}
	var live []entry
	for _, i := range order(queue) {
		it := queue[i]
		if rowsOf(it) > maxBatch {
			d.Refuse = append(d.Refuse, i)
			continue
		}
		perLevel[it.Priority]++
		if f.MaxQueueSize > 0 && perLevel[it.Priority] > f.MaxQueueSize {
			d.Refuse = append(d.Refuse, i)
			continue
		}
		if t, ok := f.timeoutAt(it); ok && now.After(t) {
			if f.TimeoutAction == Reject {
				d.Refuse = append(d.Refuse, i)
				continue
			}
			live = append(live, entry{i, true})
			continue
		}
		live = append(live, entry{i, false})
	}
	slices.SortStableFunc(live, func(a, b entry) int {
		if pa, pb := queue[a.pos].Priority, queue[b.pos].Priority; pa != pb {
			return pa - pb
		}
		switch {
		case a.delayed == b.delayed:
			return 0
		case b.delayed:
			return -1
		}
		return 1
	})
	slices.Sort(d.Refuse)
	if idle <= 0 || len(live) == 0 {
		return d
	}

	// 2. Scan for the dynamic batch (GetDynamicBatch with no payload
	// under way: each batch goes to an idle instance at once).
	pending, count := 0, 0
	best, bestCount := 0, 0
	sendNow := false
	for _, e := range live {
		rows := rowsOf(queue[e.pos])
		if count > 0 {
			if pending+rows > maxPreferred && best == 0 {
				best, bestCount = pending, count
			}
			if pending+rows > maxBatch {
				sendNow = true
				break
			}
		}
		pending += rows
		count++
		if slices.Contains(preferred, pending) {
			best, bestCount = pending, count
		}
	}
	oldest := queue[live[0].pos].Arrived
	closest := time.Time{}
	for _, e := range live[:count] {
		if a := queue[e.pos].Arrived; a.Before(oldest) {
			oldest = a
		}
		if t, ok := f.timeoutAt(queue[e.pos]); ok && !now.After(t) && (closest.IsZero() || t.Before(closest)) {
			closest = t
		}
	}
	delayExceeded := f.MaxQueueDelay > 0 && now.Sub(oldest) >= f.MaxQueueDelay

	// 3. Run a preferred batch, or everything pending, or wait.
	run := 0
	switch {
	case best > 0 && !delayExceeded:
		run = bestCount
	case sendNow || pending >= maxPreferred || delayExceeded || f.MaxQueueDelay == 0:
		run = count
	}
	if run > 0 {
		for _, e := range live[:run] {
			d.Run = append(d.Run, e.pos)
		}
		return d
	}
	d.Wake = oldest.Add(f.MaxQueueDelay)
	if !closest.IsZero() && closest.Add(time.Nanosecond).Before(d.Wake) {
		d.Wake = closest.Add(time.Nanosecond)
	}
	return d
}

// Observe does nothing: Triton's batcher does not learn.
func (f *Fixed) Observe(int, time.Duration, int) {}

// AIMD is Clipper's adaptive batching (Crankshaw et al., NSDI'17, section
// 4.3.1): the largest batch grows by Step rows after each batch that ran
// within Objective and shrinks by the factor Backoff (10% off) after one that
// overshot. Requests run as soon as an instance is free, FIFO within
// priority levels, up to the current cap; none is refused for its deadline.
type AIMD struct {
	// Objective is the latency objective a batch's run is held to.
	Objective time.Duration
	// Step is the additive increase in rows (default 1, as Clipper's
	// container grows its batch one row at a time).
	Step float64
	// Backoff is the multiplicative decrease (default 0.9).
	Backoff float64
	// Initial is the cap to start from (default 1, as Clipper starts).
	Initial int

	limit   float64 // the current cap, at least 1
	maxRows int     // the profile's MaxRows as last seen
}

var _ Policy = (*AIMD)(nil)

// Cap returns the largest batch AIMD runs now.
func (a *AIMD) Cap() int {
	if a.limit < 1 {
		a.limit = float64(max(1, a.Initial))
	}
	return int(math.Floor(a.limit))
}

// Decide runs the first requests in priority-then-arrival order, up to the cap.
func (a *AIMD) Decide(now time.Time, queue []Item, idle int, p Profile) Decision {
	a.maxRows = p.MaxRows()
	d := Decision{Refuse: refuseOversized(queue, p.MaxRows())}
	if idle <= 0 {
		return d
	}
	limit := min(a.Cap(), p.MaxRows())
	rows := 0
	for _, i := range order(queue) {
		r := rowsOf(queue[i])
		if r > p.MaxRows() {
			continue
		}
		if len(d.Run) > 0 && rows+r > limit {
			break
		}
		d.Run = append(d.Run, i)
		rows += r
	}
	return d
}

// Observe grows or shrinks the cap by how long the batch took.
func (a *AIMD) Observe(rows int, took time.Duration, late int) {
	step, backoff := a.Step, a.Backoff
	if step <= 0 {
		step = 1
	}
	if backoff <= 0 || backoff >= 1 {
		backoff = 0.9
	}
	a.Cap()
	if a.Objective > 0 && took > a.Objective {
		a.limit = max(1, a.limit*backoff)
		return
	}
	a.limit += step
	if a.maxRows > 0 && a.limit > float64(a.maxRows) {
		a.limit = float64(a.maxRows)
	}
}
