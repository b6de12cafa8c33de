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
//     late). With a backlog it also weighs the time a plan keeps the
//     instance busy (Tradeoff): giving up a request that would take small
//     batches to save pays when others are waiting.
//     The plan also holds the arrivals expected while it runs (Expect, at
//     the recent rate but never above the model's capacity, each due the
//     objective after it arrives): a small batch run to save a few urgent
//     requests delays every request that arrives meanwhile, and the plan
//     counts those it would lose. With an efficient batch or more queued
//     (the size that runs the most rows per second: a full batch where
//     batching pays), it runs an efficient batch of the earliest deadlines
//     that meets them all when the plan's first batch is no larger (giving
//     up the more urgent ones before it): a backlog served in smaller
//     batches keeps growing. When
//     the plan gives up, only for expected arrivals, requests that could
//     run in its first batch, it runs the earliest ones instead of later
//     ones (earliestFirst): those given up stay queued.
//  3. When the plan is a single batch, lower priority levels' requests
//     ride along if they fit without making it late.
//
// A request with no deadline (the zero time) is never refused and goes
// after those that have one.
//
// It waits for a fuller batch only when the objective is below twice the
// batch's latency (losesWhileBusy) and one instance is free: then a request arriving early in a
// batch cannot be served in time whatever the policy, and a batch started
// as soon as the instance is free serves only what arrived in the slack
// before it. When everything queued fits one batch it starts that batch at
// the latest time a full batch would still meet the earliest deadline (no
// known request is lost, and those arriving meanwhile join), or, when the
// gap to the next deadline is long (the arrivals expected in it, less what
// the instance would serve in that time, outnumber the one given up), at
// the next one's. On a flat 5 us profile with a 7.5 us objective this took
// deadline from 87-89% to 90-92% of the offline bound. Otherwise it does
// not wait: the plan keeps the instance busy only as long as the known
// requests need, a request that arrives while a batch runs joins the next
// (so batches grow with the load by themselves), and waiting cannot serve
// more of the known requests, only risk them on arrivals it cannot
// foresee. WaitSlack makes a lone batch
// wait for part of its slack (Clockwork's idea); in the serving benchmark
// (bench/serve) that gained about one point of goodput for a flat-latency
// model under a very tight objective and lost up to five for a model whose
// batching pays, so it is off. The benchmark measures the policy against
// the offline bound.
type Deadline struct {
	// Horizon is the most requests the plan considers (default 4 batches,
	// at most 256).
	Horizon int
	// WaitSlack, between 0 and 1, is the share of the slack a lone,
	// unfilled batch waits for more requests to join it (0: never waits).
	WaitSlack float64
	// Tradeoff weighs, when the queue holds half a full batch or more, the
	// time a plan keeps the instance busy against the requests it gives
	// up: a plan that drops one more request is chosen if it frees the
	// instance sooner by more than an efficient batch's time per row,
	// times the queue's mean rows a request, divided by Tradeoff. 0 means
	// the default, 0.5; below 0, drop as few as possible.
	Tradeoff float64
	// Expect is how many of the next arrivals the plan expects, at the
	// recent arrival rate, each with the objective of the newest request
	// (0 means the default, two full batches; below 0, none). A batch run now
	// delays the requests arriving while it runs: counting them as
	// requests the plan may lose keeps it from running a small batch to
	// save a few urgent requests when a full batch's worth is coming.
	Expect int

	arrivals  [arrivalWindow]time.Time // the latest arrivals seen, a ring
	seen      int                      // arrivals recorded in the ring
	lastSeen  time.Time                // the newest arrival recorded
	objective time.Duration            // the newest arrival's deadline after its arrival

	table []time.Duration // scratch: the latency table of a profile that keeps none
	jobs  []job           // scratch: the plan's jobs
}

// arrivalWindow is the arrivals the rate is estimated over.
const arrivalWindow = 32

// planWidth bounds the plan's frontiers: the points with the fewest drops
// carry the best plans; the rest cost time for plans that give up more.
// With 8, under an objective of 1.5 full batches on the digits network's
// profile the plan lost the schedules that keep up with 90-95% load (80-88%
// of the offline bound, 98% with 16), at half the decision's cost.
const planWidth = 16

var _ Policy = (*Deadline)(nil)

// Decide refuses the requests that cannot meet their deadline and runs the
// first batch of the best plan for the rest.
func (dl *Deadline) Decide(now time.Time, queue []Item, idle int, p Profile) Decision {
	queue = withDeadlines(now, queue)
	newest := dl.record(queue)
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
	// Everything queued fits in one batch that meets every deadline: that
	// batch is the plan (none is dropped, and no split frees the instance
	// sooner on a profile where a batch costs at most its parts), so it
	// runs without planning, which is most of the policy's cost at a light
	// or moderate load. (WaitSlack may rather wait for a fuller batch.)
	if rows, earliest := rowsIn(queue, cands), minDeadline(queue, cands); dl.WaitSlack == 0 && rows <= maxRows && !now.Add(p.Latency(rows)).After(earliest) {
		if took := p.Latency(rows); idle == 1 && dl.losesWhileBusy(took) {
			w := earliest.Add(-p.Latency(maxRows))
			if !w.After(now) && len(cands) > 1 {
				// Give up the earliest to wait for the next one's
				// latest start when the arrivals expected in the gap
				// between them, less what the instance would serve
				// in that time, outnumber it.
				next := secondDeadline(queue, cands)
				gap := next.Sub(earliest)
				if mean := dl.meanGap(); mean > 0 && float64(gap)/float64(mean)*float64(2*took-dl.objective)/float64(took) > 1 {
					w = next.Add(-p.Latency(maxRows))
				}
			}
			if w.After(now) {
				if w.Before(d.Wake) {
					d.Wake = w
				}
				return d
			}
		}
		d.Run = append(d.Run, cands...)
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

	jobs := slices.Grow(dl.jobs[:0], len(top)+maxRows)[:len(top)]
	defer func() { dl.jobs = jobs[:0] }()
	for k, i := range top {
		jobs[k] = job{deadline: int64(queue[i].Deadline.Sub(now)), rows: rowsOf(queue[i])}
	}
	known := len(jobs)
	table, eff := dl.latencies(p)
	jobs = dl.expected(now, newest, jobs, maxRows, table[eff]/time.Duration(eff))
	front := plan(jobs, 0, func(rows int) int64 { return int64(table[rows]) }, maxRows, planWidth)
	best := front[0]
	tradeoff := dl.Tradeoff
	if tradeoff == 0 {
		tradeoff = 0.5
	}
	if queued := rowsIn(queue, cands); tradeoff > 0 && 2*queued >= maxRows {
		// A backlog (half a full batch or more): time is worth requests,
		// what the freed instance could serve in it at full batches, of
		// the queue's mean rows a request (requests of 1,024 rows counted
		// as one row each made every plan give up all but one of them).
		worth := tradeoff * float64(eff) / float64(table[eff]) * float64(len(cands)) / float64(queued)
		score := func(e planEntry) float64 { return float64(e.drops) + worth*float64(e.finish) }
		for _, e := range front[1:] {
			if e.lo >= 0 && score(e) < score(best) {
				best = e
			}
		}
	}
	if best.lo < 0 || best.lo >= known {
		// The plan serves none of the known requests in its first batch:
		// they are all given up, to be refused when they expire.
		return d
	}
	best.hi = min(best.hi, known-1) // run the known part of the first batch now
	if lo, hi, ok := fullBatch(now, queue, top, table, eff); ok && rowsIn(queue, top[best.lo:best.hi+1]) <= rowsIn(queue, top[lo:hi+1]) {
		best.lo, best.hi = lo, hi
	} else {
		best.lo, best.hi = earliestFirst(now, queue, top, best.lo, best.hi, table)
	}
	rows := 0
	earliest := queue[top[best.lo]].Deadline
	for _, i := range top[best.lo : best.hi+1] {
		d.Run = append(d.Run, i)
		rows += rowsOf(queue[i])
		earliest = minTime(earliest, queue[i].Deadline)
	}
	single := best.finish == best.firstFinish
	if single && dl.WaitSlack > 0 && rows < maxRows {
		earliest := queue[top[best.lo]].Deadline
		for _, i := range top[best.lo : best.hi+1] {
			earliest = minTime(earliest, queue[i].Deadline)
		}
		slack := earliest.Sub(now) - table[rows]
		if wait := time.Duration(dl.WaitSlack * float64(slack)); wait > table[1]/100 {
			d.Run, d.Wake = nil, now.Add(wait)
			return d
		}
	}
	if single && len(top) == level {
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

// expected records the queue's new arrivals and returns jobs followed by
// the arrivals the plan expects (Expect): one every mean gap between the
// recent arrivals (or the time since the newest, if longer), each due the
// newest request's objective after it arrives. None without a rate yet.
//
// The expected rate is at most the model's capacity (perRow: the time a
// row takes in the batches that run the most rows per second). A burst
// is in the queue already, where the plan sees it for sure; the expected
// arrivals stand for the steady flow, and the mean gap of the last 32
// arrivals is a noisy estimate of it (within about 18% on Poisson
// arrivals). Expected faster than the model can serve, they make the plan
// believe in an overload in which every schedule loses some, and it gives
// up known requests for arrivals that do not come.
func (dl *Deadline) expected(now time.Time, newest Item, jobs []job, maxRows int, perRow time.Duration) []job {
	// Two full batches of requests the size of the newest, at most
	// maxExpected of them: the plan's cost grows with its jobs, and a model
	// taking 1,024 rows a call must not plan 2,048 one-row arrivals at every
	// decision.
	per := max(rowsOf(newest), 1)
	n := dl.Expect
	if n == 0 {
		n = min((2*maxRows+per-1)/per, maxExpected)
	}
	count := min(dl.seen, arrivalWindow)
	if n < 0 || count < 2 || newest.Arrived.IsZero() {
		return jobs
	}
	objective := dl.objective
	if objective <= 0 {
		return jobs
	}
	oldest := dl.arrivals[(dl.seen-count)%arrivalWindow]
	gap := dl.lastSeen.Sub(oldest) / time.Duration(count-1)
	gap = max(gap, now.Sub(dl.lastSeen), time.Duration(min(per, maxRows))*perRow, time.Nanosecond)
	for k := 1; k <= n; k++ {
		release := dl.lastSeen.Add(time.Duration(k) * gap).Sub(now)
		if release < 0 {
			continue
		}
		jobs = append(jobs, job{release: int64(release), deadline: int64(release + objective), rows: min(per, maxRows)})
	}
	return jobs
}

// latencies returns p's latency at every batch size (index 0 unused) and
// its efficient batch size: p's own table when it keeps one, else one
// filled in the policy's scratch space.
func (dl *Deadline) latencies(p Profile) ([]time.Duration, int) {
	if t, ok := p.(Tabled); ok {
		return t.LatencyTable()
	}
	n := p.MaxRows()
	table := slices.Grow(dl.table[:0], n+1)[:n+1]
	table[0] = 0
	for r := 1; r <= n; r++ {
		table[r] = p.Latency(r)
	}
	dl.table = table
	return table, efficientRows(table)
}

// EfficientRows returns the batch size of table (a latency at each batch
// size, index 0 unused) that runs the most rows per second, the largest
// of equals.
func EfficientRows(table []time.Duration) int { return efficientRows(table) }

// efficientRows returns the batch size that runs the most rows per second
// (the largest of equals): a full batch where batching pays, fewer where a
// larger batch costs more per row (on a measured CPU profile, past the
// caches).
func efficientRows(table []time.Duration) int {
	best := 1
	for r := 2; r < len(table); r++ {
		// r/table[r] >= best/table[best]
		if int64(r)*int64(table[best]) >= int64(best)*int64(table[r]) {
			best = r
		}
	}
	return best
}

// record records the queue's new arrivals and returns the newest request
// (the zero Item if there is none, or the queue holds none newer than those
// recorded before), and the objective of the newest request with a deadline.
func (dl *Deadline) record(queue []Item) Item {
	var newest Item
	for _, it := range queue {
		if it.Arrived.After(dl.lastSeen) {
			dl.arrivals[dl.seen%arrivalWindow] = it.Arrived
			dl.seen++
			dl.lastSeen = it.Arrived
			newest = it
		} else if it.Arrived.Equal(dl.lastSeen) && newest.Arrived.IsZero() {
			newest = it
		}
	}
	if !newest.Arrived.IsZero() {
		dl.objective = 0
		if o := newest.Deadline.Sub(newest.Arrived); o > 0 && o < noDeadline/2 {
			dl.objective = o
		}
	}
	return newest
}

// meanGap returns the mean gap between the recent arrivals (0 without two).
func (dl *Deadline) meanGap() time.Duration {
	count := min(dl.seen, arrivalWindow)
	if count < 2 {
		return 0
	}
	return dl.lastSeen.Sub(dl.arrivals[(dl.seen-count)%arrivalWindow]) / time.Duration(count-1)
}

// secondDeadline returns the second earliest deadline of the queue
// positions pos (at least two).
func secondDeadline(queue []Item, pos []int) time.Time {
	a, b := queue[pos[0]].Deadline, queue[pos[1]].Deadline
	if b.Before(a) {
		a, b = b, a
	}
	for _, i := range pos[2:] {
		if d := queue[i].Deadline; d.Before(a) {
			a, b = d, a
		} else if d.Before(b) {
			b = d
		}
	}
	return b
}

// losesWhileBusy reports whether a request arriving as a batch taking
// took starts cannot be served in time (the newest request's objective
// is below twice took).
func (dl *Deadline) losesWhileBusy(took time.Duration) bool {
	return dl.objective > 0 && dl.objective < 2*took
}

// maxExpected bounds the arrivals a plan expects (Expect's default).
const maxExpected = 128

// Observe does nothing: the profile is the model's measured latency.
func (dl *Deadline) Observe(int, time.Duration, int) {}

// noDeadline stands for the deadline of a request that has none.
const noDeadline = 100 * 365 * 24 * time.Hour

// withDeadlines returns queue, or a copy of it where a request with no
// deadline (the zero time) has one far in the future: it is never refused
// and goes after those that have one.
func withDeadlines(now time.Time, queue []Item) []Item {
	for i := range queue {
		if queue[i].Deadline.IsZero() {
			q := slices.Clone(queue)
			for j := range q {
				if q[j].Deadline.IsZero() {
					q[j].Deadline = now.Add(noDeadline)
				}
			}
			return q
		}
	}
	return queue
}

// fullBatch finds, when the queue holds maxRows rows or more, the batch of
// maxRows rows of the earliest deadlines that meets them all (giving up the
// more urgent ones before it): top[lo..hi]. The policy passes the efficient
// size (efficientRows): a backlog served in smaller batches to save urgent
// requests keeps growing; efficient batches keep up with it. Larger ones
// do not either where a row costs more in them: on a CPU profile whose 64
// rows cost 31 us a row and 8 rows 22 us, full batches served 81% of what
// the bound did at 95% load.
func fullBatch(now time.Time, queue []Item, top []int, table []time.Duration, maxRows int) (lo, hi int, ok bool) {
	end := now.Add(table[maxRows])
	for lo = 0; lo < len(top); lo++ {
		if queue[top[lo]].Deadline.Before(end) {
			continue
		}
		rows := 0
		for hi = lo; hi < len(top) && rows+rowsOf(queue[top[hi]]) <= maxRows; hi++ {
			rows += rowsOf(queue[top[hi]])
		}
		return lo, hi - 1, rows == maxRows
	}
	return 0, 0, false
}

// earliestFirst returns the batch the plan runs first, top[lo..hi], or
// instead as many requests from the earliest deadlines that meet the end
// of a batch of its rows, when the plan gave up requests before lo that
// could have run in it and the known requests after the new batch would
// all meet their deadlines in one batch after it (so the plan gives
// requests up only for the arrivals it expects). The plan serves as many
// either way and its later batches do not change (they hold only
// requests after hi), but a request given up before the batch expires
// before the next one could end, while one given up after it stays queued
// and is served if the expected arrivals do not come. On the ONNX digits
// network's profile (7 us for 1 row, 16.1 us for 64) at 80% load, the
// plan gave up the two oldest of 66 queued requests to run the 64 after
// them, for four arrivals it expected in a burst that did not come, where
// Triton's batcher served all 66 in time.
func earliestFirst(now time.Time, queue []Item, top []int, lo, hi int, table []time.Duration) (int, int) {
	rows := rowsIn(queue, top[lo:hi+1])
	end := now.Add(table[rows])
	first := lo
	for first > 0 && !queue[top[first-1]].Deadline.Before(end) {
		first--
	}
	if first == lo {
		return lo, hi
	}
	got, last := 0, first
	for ; last < len(top) && got+rowsOf(queue[top[last]]) <= rows; last++ {
		got += rowsOf(queue[top[last]])
	}
	last--
	if last-first < hi-lo || now.Add(table[got]).After(queue[top[first]].Deadline) {
		return lo, hi
	}
	if rest := top[last+1:]; len(rest) > 0 {
		r := rowsIn(queue, rest)
		if r > len(table)-1 || now.Add(table[got]+table[r]).After(minDeadline(queue, rest)) {
			return lo, hi
		}
	}
	return first, last
}

// rowsIn returns the rows of the queue positions pos.
func rowsIn(queue []Item, pos []int) int {
	n := 0
	for _, i := range pos {
		n += rowsOf(queue[i])
	}
	return n
}

// minDeadline returns the earliest deadline of the queue positions pos.
func minDeadline(queue []Item, pos []int) time.Time {
	m := queue[pos[0]].Deadline
	for _, i := range pos[1:] {
		m = minTime(m, queue[i].Deadline)
	}
	return m
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
