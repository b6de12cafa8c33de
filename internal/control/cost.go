package control

import (
	"fmt"
	"math"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// Pricer prices capacity: what a run of an attempt costs on the pool it ran
// on. internal/capacity implements it over a capacity file's pools.
type Pricer interface {
	// Cost returns the dollars billed for running res on pool from start to
	// end (0 when end is not after start), as the pool bills it. It errs for
	// a pool it cannot price. It must be safe for concurrent use: the API
	// prices running attempts as it reads them.
	Cost(pool string, res virga.Resources, start, end time.Time) (float64, error)
}

// AttemptCost returns what an attempt of a trial that needs res has cost as
// of now: its recorded Cost once it has ended; for a live one, the price of
// its run so far (from StartedAt to now), which is never written until it
// ends. It is 0 with a nil pricer, for an attempt not yet started, and for
// one driven through the API (it runs on the caller's own capacity).
func AttemptCost(p Pricer, a *virga.Attempt, res virga.Resources, now time.Time) (float64, error) {
	if a.State == virga.AttemptExited {
		return a.Cost, nil
	}
	return runCost(p, a, res, now)
}

// runCost prices an attempt's run from its start to end.
func runCost(p Pricer, a *virga.Attempt, res virga.Resources, end time.Time) (float64, error) {
	if p == nil || a.Backend == apiBackend || a.StartedAt.IsZero() || !end.After(a.StartedAt) {
		return 0, nil
	}
	cost, err := p.Cost(a.Pool, res, a.StartedAt, end)
	if err == nil && (math.IsNaN(cost) || math.IsInf(cost, 0) || cost < 0) {
		err = fmt.Errorf("the pricer returned %g", cost)
	}
	if err != nil {
		return 0, fmt.Errorf("pricing attempt %d: %w", a.ID, err)
	}
	return cost, nil
}

// seenAlive records that the trial's current attempt ran at t.
func (ts *trialState) seenAlive(t time.Time) {
	if t.After(ts.alive) {
		ts.alive = t
	}
}

// lostAt is when a lost attempt ended, as far as is known: the last moment
// it was seen to run (its start, its latest report, the backend's last sight
// of it), never after ev.Time, when its loss was noticed. The time between
// is not billed: the attempt may have ended at any moment of it (a server
// that was down the while, a process gone unobserved).
func lostAt(a *virga.Attempt, alive time.Time, ev backend.Event) time.Time {
	if a.StartedAt.IsZero() {
		return ev.Time // never ran: nothing to bill
	}
	end := a.StartedAt
	for _, t := range []time.Time{alive, ev.LastSeen} {
		if t.After(end) {
			end = t
		}
	}
	if end.After(ev.Time) {
		return ev.Time
	}
	return end
}

// settleCost records an ending attempt's final Cost and, when it was
// preempted, its LostCost: what it cost after its last checkpoint (the whole
// cost if it saved none), work the next attempt must do again. The part kept
// is priced as a run from the start to that checkpoint, so billing minimums
// and rounding count as lost. A run that cannot be priced is logged and
// costs 0.
func (c *Controller) settleCost(ts *trialState, a *virga.Attempt) {
	res := resources(ts.exp.spec)
	cost, err := runCost(c.cfg.Pricer, a, res, a.EndedAt)
	if err != nil {
		c.log.Warn("the attempt's cost is unknown; recorded as 0", "trial", ts.t.ID, "attempt", a.ID, "pool", a.Pool, "err", err)
	}
	a.Cost, a.LostCost = cost, 0
	ts.exp.spent += cost
	c.met.attemptEnded(ts.exp.exp.ID, a)
	if a.Outcome == virga.OutcomeSucceeded && !a.StartedAt.IsZero() && a.EndedAt.After(a.StartedAt) {
		ts.exp.runs++
		ts.exp.runTime += a.EndedAt.Sub(a.StartedAt)
	}
	if a.Outcome != virga.OutcomePreempted || cost == 0 {
		return
	}
	var saved time.Time // the attempt's last checkpoint
	for _, ck := range ts.ckpts {
		if ck.AttemptID == a.ID && ck.Time.After(saved) {
			saved = ck.Time
		}
	}
	if saved.After(a.EndedAt) {
		saved = a.EndedAt
	}
	kept := 0.0
	if saved.After(a.StartedAt) {
		if kept, err = runCost(c.cfg.Pricer, a, res, saved); err != nil {
			kept = 0
		}
	}
	a.LostCost = max(cost-kept, 0)
}
