// Package capacity holds what Virga knows of the capacity it buys: how
// providers bill it and what it costs over time (internal/capacity/trace
// reads the price and availability histories).
package capacity

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/virga-ml/virga/internal/capacity/trace"
)

// Billing is how a provider bills a node's run time: in whole increments,
// with a minimum per run. AWS and GCP bill Linux instances per second with a
// one-minute minimum; older offers bill started hours.
type Billing struct {
	Increment time.Duration // run time is rounded up to a multiple of this (1s, 1h); 0 means 1ns
	Minimum   time.Duration // the least time billed for a run
}

// Common billing models.
var (
	PerSecond = Billing{Increment: time.Second, Minimum: time.Minute}
	PerHour   = Billing{Increment: time.Hour, Minimum: time.Hour}
)

// PerTick bills a run in whole decision ticks, the last one in full, as
// Can't Be Late's simulator bills every tick a node is held: for runs that
// start on a tick boundary (as the simulator's do), each tick the node is
// held, even in part, is billed whole.
func PerTick(tick time.Duration) Billing { return Billing{Increment: tick, Minimum: tick} }

// Billed returns the time billed for a run of length run (zero for none).
func (b Billing) Billed(run time.Duration) time.Duration {
	if run <= 0 {
		return 0
	}
	inc := max(b.Increment, 1)
	billed := run
	if r := run % inc; r != 0 {
		billed += inc - r
	}
	return max(billed, b.Minimum)
}

// ErrNoPrice means the price series has no price for part of the billed time.
var ErrNoPrice = errors.New("no price")

// Cost returns the dollars of a run of share of a node (0 < share <= 1)
// from start for run, as b bills it: the billed time, from start, at the
// prices in force at each moment (a step function in USD per hour).
func Cost(s *trace.Series, start time.Time, run time.Duration, share float64, b Billing) (float64, error) {
	if !(share > 0 && share <= 1) {
		return 0, fmt.Errorf("share of the node must be in (0, 1], got %g", share)
	}
	end := start.Add(b.Billed(run))
	total := 0.0
	for t := start; t.Before(end); {
		p := s.At(t)
		if math.IsNaN(p) {
			return 0, fmt.Errorf("%w for %s %s %s at %s", ErrNoPrice, s.Key.InstanceType, s.Key.Zone, s.Key.Market, t.UTC().Format(time.RFC3339))
		}
		next := end
		if i := nextStep(s, t); i < len(s.Steps) && s.Steps[i].Time.Before(end) {
			next = s.Steps[i].Time
		}
		total += p * next.Sub(t).Hours()
		t = next
	}
	return total * share, nil
}

// nextStep returns the index of the first step after t.
func nextStep(s *trace.Series, t time.Time) int {
	return sort.Search(len(s.Steps), func(i int) bool { return s.Steps[i].Time.After(t) })
}
