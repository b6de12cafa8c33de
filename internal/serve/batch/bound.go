package batch

import (
	"fmt"
	"time"
)

// Bound returns the most requests of reqs (in arrival order) that any
// schedule of batches on one instance of a model with profile p could
// answer within their deadlines, knowing every arrival in advance; exact
// reports whether that figure is the optimum itself rather than an upper
// bound on it. The profile's latency must not decrease with rows.
//
// It is exact when every request has one row and deadlines come in arrival
// order (every request has the same objective, or at least none has a later
// arrival and an earlier deadline than another). Then some best schedule
// runs its served requests in arrival order, in batches of consecutive
// requests, with the requests between batches dropped:
//
//   - Order: if a batch runs before another but holds a later request,
//     swap the two requests. The earlier one now runs sooner, and it had
//     arrived before the later one could run; the later one runs later,
//     where the earlier one met its deadline, and its own deadline is no
//     earlier. Sizes and start times are unchanged.
//   - Consecutive: a batch of s requests whose last is request b can hold
//     instead the s requests ending at b. It starts as soon (none arrives
//     after b), takes as long, and its earliest deadline is no earlier;
//     the requests it gives back come before every request of the next
//     batches, so no other batch changes. The count served is the same.
//
// A batch starts when the instance is free and its last request has
// arrived (starting later never helps), so the recursion over requests in
// arrival order, with one state per number dropped holding the earliest
// time the instance can be free (a later time never helps), is exact: plan.
//
// Otherwise it returns the exact figure for a relaxed instance, which is
// an upper bound: each request with one row, and each deadline raised to
// the latest deadline of the requests that arrived up to it. Any schedule
// of the real requests serves at least as many of the relaxed ones on
// time, since fewer rows take no longer and later deadlines still hold.
func Bound(reqs []Item, p Profile) (served int, exact bool, err error) {
	if len(reqs) == 0 {
		return 0, true, nil
	}
	origin := reqs[0].Arrived
	jobs := make([]job, len(reqs))
	exact = true
	var latest int64
	for i, it := range reqs {
		if i > 0 && it.Arrived.Before(reqs[i-1].Arrived) {
			return 0, false, fmt.Errorf("request %d arrived at %v, before request %d (%v): requests must be in arrival order", i, it.Arrived, i-1, reqs[i-1].Arrived)
		}
		dl := int64(it.Deadline.Sub(origin))
		if i == 0 {
			latest = dl
		}
		if dl < latest {
			exact = false
		}
		latest = max(latest, dl)
		if it.Rows > 1 {
			exact = false
		}
		jobs[i] = job{release: int64(it.Arrived.Sub(origin)), deadline: latest, rows: 1}
	}
	table := latencyTable(p)
	front := plan(jobs, -1<<62, func(rows int) int64 { return int64(table[rows]) }, p.MaxRows(), 0)
	if len(front) == 0 {
		return 0, exact, nil
	}
	return len(reqs) - front[0].drops, exact, nil
}

// Latencies of a profile for the recursion's rows, looked up once.
func latencyTable(p Profile) []time.Duration {
	t := make([]time.Duration, p.MaxRows()+1)
	for r := 1; r <= p.MaxRows(); r++ {
		t[r] = p.Latency(r)
	}
	return t
}
