package batch

// job is one request as the planning recursion sees it, in nanoseconds from
// an origin.
type job struct {
	release  int64
	deadline int64
	rows     int
}

// planEntry is one point of a frontier: having decided the first i jobs,
// drops of them were left out and the machine is free at finish. first is
// the plan's first batch, jobs [lo, hi], and firstFinish when it ends (lo
// is -1 before any batch).
type planEntry struct {
	drops       int
	finish      int64
	lo, hi      int
	firstFinish int64
}

// plan is the exact batching recursion over jobs taken in the given order:
// each batch is a run of consecutive jobs (those between batches are
// dropped), starting when the machine is free and its last job has arrived,
// and on time when it ends by the earliest deadline among its jobs. It
// returns the frontier after the last job: for each number of drops, the
// earliest finish, fewest drops first (only the points where more drops buy
// an earlier finish).
//
// Where jobs are in order of both release and deadline and each has one
// row, some best schedule has this form (see Bound), so the frontier's
// first point is optimal. start is when the machine is first free. A width
// above 0 keeps only that many points of each frontier (fewest drops
// first): faster, no longer exact.
func plan(jobs []job, start int64, latency func(rows int) int64, maxRows, width int) []planEntry {
	n := len(jobs)
	frontiers := make([][]planEntry, n+1)
	frontiers[0] = []planEntry{{finish: start, lo: -1, hi: -1}}
	var cands []planEntry
	var best []int32
	for b := 1; b <= n; b++ {
		cands = cands[:0]
		// Job b-1 (0-indexed) ends a batch of s jobs.
		rows := 0
		minDeadline := int64(1<<63 - 1)
		for s := 1; s <= b; s++ {
			a := b - s // 0-indexed first job of the batch
			rows += jobs[a].rows
			if rows > maxRows {
				break
			}
			minDeadline = min(minDeadline, jobs[a].deadline)
			lat := latency(rows)
			for _, e := range frontiers[a] {
				fin := max(e.finish, jobs[b-1].release) + lat
				if fin > minDeadline {
					continue
				}
				c := planEntry{drops: e.drops, finish: fin, lo: e.lo, hi: e.hi, firstFinish: e.firstFinish}
				if e.lo < 0 {
					c.lo, c.hi, c.firstFinish = a, b-1, fin
				}
				cands = append(cands, c)
			}
		}
		// Or job b-1 is dropped.
		for _, e := range frontiers[b-1] {
			e.drops++
			cands = append(cands, e)
		}
		next := int64(-1 << 63)
		if b < n {
			next = jobs[b].release
		}
		if cap(best) < b+1 {
			best = make([]int32, 0, 2*(b+1))
		}
		frontiers[b] = paretoInto(best, cands, next)
		if width > 0 && len(frontiers[b]) > width {
			frontiers[b] = frontiers[b][:width]
		}
		if b > maxRows+1 {
			frontiers[b-maxRows-2] = nil // no longer reachable: batches hold at most maxRows jobs
		}
	}
	return frontiers[n]
}

// pareto keeps, fewest drops first (then earliest finish, then largest
// first batch, then the first candidate), the entries that finish strictly
// earlier than every entry with fewer drops, and stops after the first one
// that finishes by next (the next job's release: finishing any earlier
// gains nothing). Only the best candidate of each number of drops can be
// kept, so one pass picks those and a second filters them: no sort (the
// sort was most of the deadline policy's time at a backlog).
func pareto(cands []planEntry, next int64) []planEntry {
	return paretoInto(nil, cands, next)
}

// paretoInto is pareto with best as scratch space (grown as needed).
func paretoInto(best []int32, cands []planEntry, next int64) []planEntry {
	maxDrops := 0
	for _, c := range cands {
		maxDrops = max(maxDrops, c.drops)
	}
	// Per number of drops, 1 + its best candidate's index; 0: none.
	if cap(best) < maxDrops+1 {
		best = make([]int32, maxDrops+1)
	}
	best = best[:maxDrops+1]
	clear(best)
	for i, c := range cands {
		j := best[c.drops]
		if j == 0 {
			best[c.drops] = int32(i + 1)
			continue
		}
		b := cands[j-1]
		if c.finish < b.finish || c.finish == b.finish && c.hi-c.lo > b.hi-b.lo {
			best[c.drops] = int32(i + 1)
		}
	}
	var out []planEntry
	for _, j := range best {
		if j == 0 {
			continue
		}
		c := cands[j-1]
		if len(out) > 0 && c.finish >= out[len(out)-1].finish {
			continue
		}
		out = append(out, c)
		if c.finish <= next {
			break
		}
	}
	return out
}
