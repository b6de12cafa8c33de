package control

import (
	"slices"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/schedule"
)

// An experiment policy's snapshot (Controller.snapshot) sums every trial of
// the experiment, but most trials of a large search do not change between
// two passes: the ended ones, and the ones the searcher paused (until it
// resumes them). Those are settled: their part of the sums is kept in a
// settledSums, added once when they settle and taken out again by setTrial
// when they change state, and each pass visits only the other trials
// (expState.active). The sums are integers, so the snapshot is the same as
// one that visits every trial, in the same order.

// settledPart is what a settled trial adds to the snapshot's sums.
type settledPart struct {
	step       int64         // the trial's step (rungs reached and passed)
	done       int64         // steps done and kept since its parent's
	doneTime   time.Duration // done times its own mean step time, if measured
	mean       time.Duration // its own mean step time (0: none measured)
	terminal   bool
	keptOfLive int64 // for a paused trial, the step it would go on from
}

// settledSums is the sum of the settled trials' parts of an experiment.
type settledSums struct {
	shapeSteps int64 // the shape the rung counts are for (its Steps)
	shape      schedule.SearchShape
	steps      int64
	done       time.Duration // of the trials whose step time is measured
	unmeasured int64         // steps done by trials without a measured step time
	reached    []int
	passed     []int
	attempts   int
	ended      int
	endedSteps int64
	means      []time.Duration // sorted
	lowest     map[int64]int   // paused trials per kept step
}

func (s *settledSums) apply(p *settledPart, sign int) {
	s.steps += int64(sign) * p.done
	if p.mean > 0 {
		s.done += time.Duration(sign) * p.doneTime
		i, _ := slices.BinarySearch(s.means, p.mean)
		if sign > 0 {
			s.means = slices.Insert(s.means, i, p.mean)
		} else {
			s.means = slices.Delete(s.means, i, i+1)
		}
	} else {
		s.unmeasured += int64(sign) * p.done
	}
	for k, r := range s.shape.Rungs {
		if p.step >= r {
			s.reached[k] += sign
			if p.step > r {
				s.passed[k] += sign
				if s.shape.Promote {
					s.attempts += sign
				}
			}
		}
	}
	s.attempts += sign
	if p.terminal {
		s.ended += sign
		s.endedSteps += int64(sign) * p.step
		return
	}
	if s.lowest == nil {
		s.lowest = map[int64]int{}
	}
	s.lowest[p.keptOfLive] += sign
	if s.lowest[p.keptOfLive] == 0 {
		delete(s.lowest, p.keptOfLive)
	}
}

// settled reports whether ts's part of the snapshot stays as it is until
// its state changes: it ended, or it is paused with no attempt.
func settled(ts *trialState) bool {
	return ts.t.State.Terminal() || ts.attempt == nil && ts.t.State == virga.TrialPaused
}

// settle moves the trials of es.active that settled into es's sums, for
// the search shape given, and returns the sums. A shape other than the
// sums' (the steps of a trial changed: the most any completed trial
// reached) sums every settled trial again.
func (es *expState) settle(shape schedule.SearchShape) *settledSums {
	s := &es.settled
	if s.reached == nil || s.shapeSteps != shape.Steps {
		*s = settledSums{shapeSteps: shape.Steps, shape: shape, reached: make([]int, len(shape.Rungs)), passed: make([]int, len(shape.Rungs))}
		for _, ts := range es.trials {
			if ts.part != nil {
				s.apply(ts.part, 1)
			}
		}
	}
	if !es.mayHaveSettled {
		return s // no trial of es.active changed state or ended its attempt since
	}
	es.mayHaveSettled = false
	es.active = slices.DeleteFunc(es.active, func(ts *trialState) bool {
		if !settled(ts) {
			return false
		}
		t := ts.t
		kept := keptStep(ts)
		p := &settledPart{step: t.Step, done: max(kept-t.ParentStep, 0), mean: ts.speed.stepTime(), terminal: t.State.Terminal(), keptOfLive: kept}
		p.doneTime = time.Duration(p.done) * p.mean
		ts.part = p
		s.apply(p, 1)
		return true
	})
	return s
}

// unsettle takes ts's part out of its experiment's sums, when its state
// changes, and makes it active again, in its place among the trials.
func (ts *trialState) unsettle() {
	es := ts.exp
	es.mayHaveSettled = true // it may have settled instead
	if ts.part == nil {
		return
	}
	if es.settled.reached != nil {
		es.settled.apply(ts.part, -1)
	}
	ts.part = nil
	i, _ := slices.BinarySearchFunc(es.active, ts.idx, func(a *trialState, idx int) int { return a.idx - idx })
	es.active = slices.Insert(es.active, i, ts)
}

// addTrial appends a trial to es's trials.
func (es *expState) addTrial(ts *trialState) {
	ts.idx = len(es.trials)
	es.trials = append(es.trials, ts)
	es.active = append(es.active, ts)
	es.mayHaveSettled = true
}

// quantile returns the element at index k of the sorted union of a and b,
// both sorted.
func quantile(a, b []time.Duration, k int) time.Duration {
	// Take i from a and k+1-i from b, with a[i-1] <= b[k+1-i] and b[k-i] <= a[i].
	lo, hi := max(0, k+1-len(b)), min(k+1, len(a))
	for lo < hi {
		i := (lo + hi) / 2
		if a[i] < b[k-i] {
			lo = i + 1
		} else {
			hi = i
		}
	}
	i, j := lo, k+1-lo
	switch {
	case i == 0:
		return b[j-1]
	case j == 0:
		return a[i-1]
	}
	return max(a[i-1], b[j-1])
}
