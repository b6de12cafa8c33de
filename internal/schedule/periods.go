package schedule

import (
	"slices"
	"time"
)

// Periods is the distribution of the lengths of a spot pool's up periods or
// of its outages, as measured on its history. Real ones are not memoryless:
// most outages last a few minutes and a few last days, so the longer an
// outage has lasted, the less likely capacity is to come back in the next
// minutes (and many up periods end within a tick or two, while the others
// last hours). Planned reads it as the chance that the period ends in the
// next decision interval given how long it has lasted (the hazard).
//
// A Periods is immutable; PoolStats holds it by pointer, and a plan is
// solved once per pointer.
type Periods struct {
	lengths []time.Duration // sorted
}

// NewPeriods returns the distribution of the given period lengths (the
// slice is copied; non-positive lengths are left out). It returns nil for
// no periods.
func NewPeriods(lengths []time.Duration) *Periods {
	var ls []time.Duration
	for _, l := range lengths {
		if l > 0 {
			ls = append(ls, l)
		}
	}
	if len(ls) == 0 {
		return nil
	}
	slices.Sort(ls)
	return &Periods{lengths: ls}
}

// Len returns the number of periods measured.
func (o *Periods) Len() int { return len(o.lengths) }

// ageEdges returns the first age (in ticks since the period began) of each
// age band a plan tracks: one band per tick for the first four ticks, then
// bands twice as wide every other band (4, 6, 8, 12, 16, 24, ...), up to
// limit ticks; the last band is open.
func ageEdges(limit int) []int {
	edges := []int{0}
	for a := 1; a < 4 && a < limit; a++ {
		edges = append(edges, a)
	}
	for a := 4; a < limit; a *= 2 {
		edges = append(edges, a)
		if a+a/2 < limit {
			edges = append(edges, a+a/2)
		}
	}
	return edges
}

// endRates returns, for each age band of edges, the chance per tick that a
// period whose age lies in the band ends: the periods that ended in the
// band over the ticks periods spent in it. A band
// little observed is drawn towards the overall rate (prior, per tick) with
// the weight of one outage.
func (o *Periods) endRates(tick time.Duration, edges []int, prior float64) []float64 {
	// Length in ticks of each period, at least one.
	ls := make([]int, len(o.lengths))
	total := 0
	for i, l := range o.lengths {
		ls[i] = max(1, int((l+tick/2)/tick))
		total += ls[i]
	}
	weight := float64(total) / float64(len(ls)) // ticks of one mean period
	rates := make([]float64, len(edges))
	for b, lo := range edges {
		hi := int(^uint(0) >> 1)
		if b+1 < len(edges) {
			hi = edges[b+1]
		}
		ended, exposure := 0.0, 0.0
		for _, n := range ls {
			// Ages 0..n-1 are spent in the period; it ends after age n-1.
			if n <= lo {
				continue
			}
			exposure += float64(min(n, hi) - lo)
			if n-1 < hi {
				ended++
			}
		}
		rates[b] = (ended + prior*weight) / (exposure + weight)
	}
	return rates
}
