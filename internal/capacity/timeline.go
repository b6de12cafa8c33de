package capacity

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Timeline is when a pool's capacity is available, from some start on: the
// replay of a trace, a random draw of a rate model, the times a price is
// above a bid, or always. Up answers in O(log n) over its change points and
// allocates nothing (a rate model's timeline draws more change points, in
// batches, only when asked past those drawn so far). A Timeline is immutable
// in what it answers and safe for concurrent use; a nil *Timeline is always
// up.
type Timeline struct {
	origin time.Time
	// up0 is the state at origin (and, periodic, at each period's start).
	up0 bool
	// changes are the offsets from origin where the state flips, strictly
	// increasing: in (0, period) when periodic, > 0 otherwise.
	changes []time.Duration
	// period > 0 repeats the changes every period; wrap says the state
	// flips at the end of each period too. offset is where in the period
	// origin falls.
	period time.Duration
	wrap   bool
	offset time.Duration
	// gen draws the changes of a rate model lazily; nil otherwise.
	gen *generator
}

// Up reports whether capacity is available at t and when that next changes
// (the zero time when it never does).
func (tl *Timeline) Up(t time.Time) (up bool, next time.Time) {
	if tl == nil {
		return true, time.Time{}
	}
	d := t.Sub(tl.origin)
	if tl.period > 0 {
		return periodic(t, d, tl.changes, tl.period, tl.wrap, tl.offset, tl.up0)
	}
	changes := tl.changes
	if tl.gen != nil {
		g := tl.gen.cover(d)
		if g.period > 0 {
			return periodic(t, d, g.changes, g.period, true, 0, tl.up0)
		}
		changes = g.changes
	}
	i := countAtOrBefore(changes, d)
	up = tl.up0 != (i&1 == 1)
	if i == len(changes) {
		return up, time.Time{}
	}
	return up, tl.origin.Add(changes[i])
}

// periodic answers Up for changes repeating every period, origin at offset
// into the period.
func periodic(t time.Time, d time.Duration, changes []time.Duration, period time.Duration, wrap bool, offset time.Duration, up0 bool) (bool, time.Time) {
	r := d % period
	if r < 0 {
		r += period
	}
	r += offset // both below period: no overflow
	if r >= period {
		r -= period
	}
	i := countAtOrBefore(changes, r)
	up := up0 != (i&1 == 1)
	var next time.Duration
	switch {
	case i < len(changes):
		next = changes[i]
	case wrap:
		next = period
	case len(changes) > 0:
		next = period + changes[0]
	default:
		return up, time.Time{}
	}
	return up, t.Add(next - r)
}

// countAtOrBefore is the number of changes at or before d.
func countAtOrBefore(changes []time.Duration, d time.Duration) int {
	i, found := slices.BinarySearch(changes, d)
	if found {
		i++
	}
	return i
}

// Limits of a rate model's lazily drawn timeline: it repeats after
// maxDrawnChanges changes (hundreds of thousands of reclaims), and draws no
// change past maxHorizon.
const (
	maxDrawnChanges = 1 << 20
	maxHorizon      = 200 * 365 * 24 * time.Hour
	firstBatch      = 64
)

// generator draws the alternating up and down times of a rate model.
type generator struct {
	mu             sync.Mutex // serialises drawing
	cur            atomic.Pointer[drawn]
	rng            *rand.Rand // guarded by mu
	meanUp, outage float64    // nanoseconds
	up             bool       // the state after the last change drawn; guarded by mu
}

// drawn is an immutable snapshot of the changes drawn so far. period > 0
// means drawing stopped at maxDrawnChanges and the timeline repeats: the
// changes before the last, wrapping at the last.
type drawn struct {
	changes []time.Duration
	done    bool // nothing more will be drawn
	period  time.Duration
}

// cover returns a snapshot whose changes reach past d, or the final one.
func (g *generator) cover(d time.Duration) *drawn {
	s := g.cur.Load()
	if s.done || len(s.changes) > 0 && s.changes[len(s.changes)-1] > d {
		return s
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s = g.cur.Load()
	if s.done || len(s.changes) > 0 && s.changes[len(s.changes)-1] > d {
		return s
	}
	// Readers of older snapshots only read below their own length, so
	// appending in place past it is safe.
	changes := s.changes
	want := max(2*len(changes), firstBatch)
	last := time.Duration(0)
	if len(changes) > 0 {
		last = changes[len(changes)-1]
	}
	next := &drawn{}
	for len(changes) < want || last <= d {
		if len(changes) >= maxDrawnChanges {
			// Wrap with an even number of changes, so that the state at
			// the wrap is the state at origin.
			n := len(changes) &^ 1
			next.changes, next.period, next.done = changes[:n-1], changes[n-1], true
			g.cur.Store(next)
			return next
		}
		mean := g.outage
		if g.up {
			mean = g.meanUp
		}
		step := time.Duration(math.Min(g.rng.ExpFloat64()*mean, float64(maxHorizon)))
		if last+step > maxHorizon {
			next.done = true
			break
		}
		last += max(step, 1)
		changes = append(changes, last)
		g.up = !g.up
	}
	next.changes = changes
	g.cur.Store(next)
	return next
}
