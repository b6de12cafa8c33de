package batch

import (
	"slices"
	"time"
)

// Deadline is Virga's default policy: it maximizes goodput, the requests
// answered within their deadlines, using the model's latency profile
// (Clockwork's observation: inference time is predictable, so a scheduler
// can know what meets a deadline before it runs it).
//
//  1. A request that cannot meet its deadline even alone (now + latency of
//     its rows > deadline) is refused at once: serving it late would only
//     delay the others.
//  2. With an instance free, it plans the highest priority level's queue
//     (up to Horizon requests, earliest deadline first) as if nothing else
//     arrived: the exact recursion of the offline bound (plan) finds the
//     batches that serve the most of them on time, and among those the plan
//     that frees the instance soonest, so larger batches where batching
//     pays. It runs the plan's first batch now. That is the largest batch
//     meeting the earliest deadline when everything fits, and it gives up
//     on a request about to expire when keeping it would cost more requests
//     than it saves (a bare earliest-deadline rule collapses under
//     overload: small batches for the oldest requests make every request
//     late).
//  3. When the plan is a single batch, lower priority levels' requests
//     ride along if they fit without making it late.
//
// It never waits for a fuller batch: the plan already keeps the instance
// busy only as long as the known requests need, a request that arrives
// while a batch runs joins the next (so batches grow with the load by
// themselves), and waiting cannot serve more of the known requests, only
// risk them on arrivals it cannot foresee. The serving benchmark
// (bench/serve) measures it against the offline bound.
type Deadline struct {
	// Horizon is the most requests the plan considers (default 4 batches,
	// at most 256).
	Horizon int
}

// planWidth bounds the plan's frontiers: the points with the fewest drops
// carry the best plans; the rest cost time for plans that give up more.
const planWidth = 8

var _ Policy = (*Deadline)(nil)

// Decide refuses the requests that cannot meet their deadline and runs the
// first batch of the best plan for the rest.
func (dl *Deadline) Decide(now time.Time, queue []Item, idle int, p Profile) Decision {
	maxRows := p.MaxRows()
	var d Decision
	var cands []int
	for i, it := range queue {
		r := rowsOf(it)
		if r > maxRows || now.Add(p.Latency(r)).After(it.Deadline) {
			d.Refuse = append(d.Refuse, i)
			continue
		}
		cands = append(cands, i)
		// Wake when the first of the others could no longer meet its
		// deadline, to refuse it then.
		if w := it.Deadline.Add(-p.Latency(r) + time.Nanosecond); d.Wake.IsZero() || w.Before(d.Wake) {
			d.Wake = w
		}
	}
	if idle <= 0 || len(cands) == 0 {
		return d
	}
	slices.SortStableFunc(cands, func(a, b int) int {
		x, y := queue[a], queue[b]
		if x.Priority != y.Priority {
			return x.Priority - y.Priority
		}
		return x.Deadline.Compare(y.Deadline)
	})
	level := 0
	for level < len(cands) && queue[cands[level]].Priority == queue[cands[0]].Priority {
		level++
	}
	horizon := dl.Horizon
	if horizon <= 0 {
		horizon = min(4*maxRows, 256)
	}
	top := cands[:min(level, horizon)]

	jobs := make([]job, len(top))
	for k, i := range top {
		jobs[k] = job{deadline: int64(queue[i].Deadline.Sub(now)), rows: rowsOf(queue[i])}
	}
	table := latencyTable(p)
	front := plan(jobs, 0, func(rows int) int64 { return int64(table[rows]) }, maxRows, planWidth)
	best := front[0]
	if best.lo < 0 {
		return d // cannot happen: every candidate meets its deadline alone
	}
	rows := 0
	earliest := queue[top[best.lo]].Deadline
	for _, i := range top[best.lo : best.hi+1] {
		d.Run = append(d.Run, i)
		rows += rowsOf(queue[i])
		earliest = minTime(earliest, queue[i].Deadline)
	}
	if best.finish == best.firstFinish && len(top) == level {
		for _, i := range cands[level:] {
			r := rowsOf(queue[i])
			e := minTime(earliest, queue[i].Deadline)
			if rows+r <= maxRows && !now.Add(p.Latency(rows+r)).After(e) {
				d.Run = append(d.Run, i)
				rows += r
				earliest = e
			}
		}
	}
	return d
}

// Observe does nothing: the profile is the model's measured latency.
func (dl *Deadline) Observe(int, time.Duration, int) {}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
