package search

import "math/rand/v2"

// Observation is what a sampler learns from: one trial's configuration and
// how far and how well it got.
type Observation struct {
	HParams map[string]any
	// Value is the trial's objective at Step in minimising form: the value as
	// reported for a minimised objective, its negation for a maximised one.
	Value float64
	// Step is the furthest step the trial reported. A trial that got further
	// ranks before one that was stopped earlier, whatever their values.
	Step int64
	// Complete is true when the trial ran to its end.
	Complete bool
}

// sampler chooses the configurations of new trials. A sampler keeps no state
// of its own between calls: everything it knows comes from hist and r, which
// the searcher that owns it snapshots, so a restored search samples the same.
type sampler interface {
	// next returns a new configuration given the finished (or paused) trials
	// so far, in the order they were proposed, drawing randomness only from r.
	next(r *rand.Rand, hist []Observation) (map[string]any, error)
}
