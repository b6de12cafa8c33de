package schedule

import (
	"slices"
	"time"
)

// Outages is the distribution of a spot pool's outage lengths, as measured
// on its history. Real outages are not memoryless: most last a few minutes,
// a few last days, so the longer an outage has lasted, the less likely
// capacity is to come back in the next minutes. Planned reads it as the
// chance that capacity returns in the next decision interval given how long
// the outage has lasted (the hazard).
//
// An Outages is immutable; PoolStats holds it by pointer, and a plan is
// solved once per pointer.
type Outages struct {
	lengths []time.Duration // sorted
}

// NewOutages returns the distribution of the given outage lengths (the
// slice is copied; non-positive lengths are left out). It returns nil for
// no outages.
func NewOutages(lengths []time.Duration) *Outages {
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
	return &Outages{lengths: ls}
}

// Len returns the number of outages measured.
func (o *Outages) Len() int { return len(o.lengths) }

// ageEdges returns the first age (in ticks since the outage began) of each
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

// returnRates returns, for each age band of edges, the chance per tick that
// capacity comes back during an outage whose age lies in the band: the
// outages that ended in the band over the ticks outages spent in it. A band
// little observed is drawn towards the overall rate (prior, per tick) with
// the weight of one outage.
func (o *Outages) returnRates(tick time.Duration, edges []int, prior float64) []float64 {
	// Length in ticks of each outage, at least one.
	ls := make([]int, len(o.lengths))
	total := 0
	for i, l := range o.lengths {
		ls[i] = max(1, int((l+tick/2)/tick))
		total += ls[i]
	}
	weight := float64(total) / float64(len(ls)) // ticks of one mean outage
	rates := make([]float64, len(edges))
	for b, lo := range edges {
		hi := int(^uint(0) >> 1)
		if b+1 < len(edges) {
			hi = edges[b+1]
		}
		ended, exposure := 0.0, 0.0
		for _, n := range ls {
			// Ages 0..n-1 are spent down; capacity returns after age n-1.
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
