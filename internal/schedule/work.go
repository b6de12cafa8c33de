package schedule

import (
	"math"
	"time"

	"github.com/virga-ml/virga/internal/spec"
)

// SearchShape is what the length of a search depends on, from its
// experiment file: how many trials it runs, how long a trial is, and where a
// stopper may end or pause trials early.
type SearchShape struct {
	Trials int   // max_trials
	Steps  int64 // steps of a trial that runs to its end
	// Rungs are the steps, ascending and below Steps, at which a rung-based
	// stopper (asha, hyperband) judges trials; Keep is the fraction of the
	// trials at a rung that go on (1/reduction_factor). Brackets holds the
	// first rung and weight of each Hyperband bracket (ASHA: one).
	Rungs    []int64
	Keep     float64
	Brackets []Bracket
	// Promote says trials pause at each rung (ASHA's promote mode): each
	// rung a trial passes costs it a restart.
	Promote bool
	// Measured means the steps per trial cannot be told in advance (the
	// median and curve stoppers, pbt): EstimateWork measures them on the
	// trials that ended.
	Measured bool
}

// Bracket is one bracket of a rung-based stopper.
type Bracket struct {
	Min    int64
	Weight float64
}

// ShapeOf returns the shape of e's search for trials of steps steps (the
// trainer's length; max_resource, when set and shorter, ends them sooner).
// The rungs follow the stoppers' definition (docs/search.md): min_resource
// times reduction_factor^k, below max_resource.
func ShapeOf(e *spec.Experiment, steps int64) SearchShape {
	s := SearchShape{Trials: e.MaxTrials, Steps: steps, Keep: 1}
	ss := e.Searcher
	if m := ss.Int("max_resource", 0); m > 0 && m < steps {
		s.Steps = m
	}
	switch ss.Stopper {
	case "asha", "hyperband":
		eta := max(ss.Int("reduction_factor", 3), 2)
		// The searcher's own default first rung (spec.DefaultMinResource)
		// when min_resource is not set.
		minR := max(ss.Int("min_resource", spec.DefaultMinResource(ss.Int("max_resource", 0), eta)), 1)
		s.Keep = 1 / float64(eta)
		s.Promote = ss.Text("mode", "stop") == "promote"
		for r := minR; r < s.Steps; r *= eta {
			s.Rungs = append(s.Rungs, r)
			if r > math.MaxInt64/eta {
				break
			}
		}
		s.Brackets = []Bracket{{Min: minR, Weight: 1}}
		if ss.Stopper == "hyperband" {
			smax := 0
			for r := minR; r <= s.Steps/eta; r *= eta {
				smax++
			}
			s.Brackets = nil
			for k := smax; k >= 0; k-- {
				b := Bracket{Min: minR * int64(math.Pow(float64(eta), float64(smax-k))),
					Weight: math.Ceil(float64(smax+1) / float64(k+1) * math.Pow(float64(eta), float64(k)))}
				s.Brackets = append(s.Brackets, b)
			}
		}
	case "":
		if ss.Name == "pbt" {
			s.Measured = true
		}
	default:
		s.Measured = true
	}
	return s
}

// StepsPerTrial is the expected steps of one trial: all of them without a
// stopper; with a rung-based one, the first rung, then each segment
// between rungs (and the last, to the end) times the fraction of trials
// that get there, averaged over the brackets by weight. keep[k], when
// given, is the fraction of the trials at rung k that go on past it
// (Survival); Keep otherwise.
func (s SearchShape) StepsPerTrial(keep []float64) float64 {
	if len(s.Brackets) == 0 {
		return float64(s.Steps)
	}
	total, weights := 0.0, 0.0
	for _, b := range s.Brackets {
		steps, frac, prev := 0.0, 1.0, int64(0)
		for k, r := range s.Rungs {
			if r < b.Min {
				continue
			}
			steps += float64(r-prev) * frac
			if k < len(keep) {
				frac *= keep[k]
			} else {
				frac *= s.Keep
			}
			prev = r
		}
		steps += float64(s.Steps-prev) * frac
		total += b.Weight * steps
		weights += b.Weight
	}
	return total / weights
}

// AttemptsPerTrial is the expected attempts of one trial, restarts after
// preemptions aside: one, and in promote mode one more for each rung it
// passes (it pauses there and is resumed), with the fractions of keep as
// for StepsPerTrial.
func (s SearchShape) AttemptsPerTrial(keep []float64) float64 {
	if !s.Promote {
		return 1
	}
	n, frac := 1.0, 1.0
	for k := range s.Rungs {
		if k < len(keep) {
			frac *= keep[k]
		} else {
			frac *= s.Keep
		}
		n += frac
	}
	return n
}

// LastRung is the highest rung (0 without rungs): a trial that goes on past
// it runs to its end.
func (s SearchShape) LastRung() int64 {
	if len(s.Rungs) == 0 {
		return 0
	}
	return s.Rungs[len(s.Rungs)-1]
}

// Final reports whether a trial at step that runs now goes on to its end
// unless something fails: it has passed the last rung (or there are none).
func (s SearchShape) Final(step int64) bool {
	return len(s.Rungs) > 0 && step >= s.LastRung()
}

// PauseAhead reports whether a trial at step that runs now reaches a rung
// before its end where the searcher pauses it unless it promotes it at
// once: the stopper is in promote mode and the trial is not Final. (In stop
// mode a trial the stopper lets go on past a rung does not stop there.)
func (s SearchShape) PauseAhead(step int64) bool {
	return s.Promote && len(s.Rungs) > 0 && step < s.LastRung()
}

// NextStop is the first step after step at which the trial may be stopped
// or paused: its next rung, or its end.
func (s SearchShape) NextStop(step int64) int64 {
	for _, r := range s.Rungs {
		if r > step {
			return r
		}
	}
	return s.Steps
}

// Progress is what a search has done so far, in steps.
type Progress struct {
	Steps int64 // done and kept, all trials
	// Ended is the number of trials ended and EndedSteps their steps.
	Ended      int
	EndedSteps int64
	// Live holds each trial that runs or waits for a node.
	Live []LiveTrial
	// Lowest is the fewest steps any trial not ended has done (paused ones
	// too): while the searcher may still promote it, the experiment's end
	// is no sooner than it can run to its end.
	Lowest int64
	// Reached[k] is how many trials reached rung k, Passed[k] how many of
	// them went on past it (a rung-based stopper's; nil otherwise).
	Reached, Passed []int
	// Attempts is how many times a trial was started or resumed so far
	// (restarts after preemptions aside), and Overhead the restart
	// overhead each costs.
	Attempts int
	Overhead time.Duration
	// Exhausted means the searcher will neither create nor resume trials.
	Exhausted bool
	// StepTime is the mean time of a step on a node, over all steps; Slow
	// the time of a step of a slow trial (a high quantile of the trials'
	// own mean step times), for the chain of trials to come.
	StepTime, Slow time.Duration
}

// LiveTrial is a trial that runs or waits for a node: the steps it has
// done and the mean time of its steps (0: none measured yet).
type LiveTrial struct {
	Step     int64
	StepTime time.Duration
}

// Survival returns the fraction of the trials at each rung expected to go on
// past it (they were promoted: resumed, or went on at once): what the
// trials did so far, starting from sqrt(Keep) with the weight of 20 trials. Asynchronous successive halving promotes more
// than 1/reduction_factor, the more so the more trials run at once (with
// reduction factor 3, 0.4 of the trials at 1 trial at a time, 0.5-0.65 at
// 16 to 64 on the digits-mlp table), so the prior leans to more work: an
// estimate too high costs on-demand time, one too low a deadline.
func (s SearchShape) Survival(p Progress) []float64 {
	const prior = 20 // trials' worth of weight on the prior
	keep := make([]float64, len(s.Rungs))
	for k := range keep {
		reached, passed := 0, 0
		if k < len(p.Reached) && k < len(p.Passed) {
			reached, passed = p.Reached[k], p.Passed[k]
		}
		keep[k] = (prior*math.Sqrt(s.Keep) + float64(passed)) / float64(prior+reached)
	}
	return keep
}

// EstimateWork returns the work a search still needs (left: all trials
// summed) and the part of it that must run in sequence (chain: the work of
// the last trial to finish, which no number of nodes shortens).
//
// Left is what the live trials need to reach their next stop (their end,
// for a Final one), at their own step times, and no less than the
// expected steps of the whole search less those done, at the mean step
// time: Trials x StepsPerTrial with the fractions Survival measures, or,
// for a measured shape, the mean steps of the trials that ended (starting
// from a full trial's).
//
// Both count the restart overhead of the attempts to come: in promote mode
// each rung a trial passes costs one (AttemptsPerTrial).
//
// Chain is the most a live trial needs to its next stop (its end, for a
// Final one); and while the searcher may still create or promote trials,
// no less than what the least advanced trial not ended would need to run
// to its end at the Slow step time: the search may promote it to the top
// last (asynchronous successive halving often does).
func (s SearchShape) EstimateWork(p Progress) (left, chain time.Duration) {
	var live float64
	var liveSteps int64
	for _, lt := range p.Live {
		stop := s.NextStop(lt.Step)
		if s.Final(lt.Step) {
			stop = s.Steps
		}
		st := lt.StepTime
		if st <= 0 {
			st = p.StepTime
		}
		n := max(stop-lt.Step, 0)
		liveSteps += n
		live += float64(n) * float64(st)
		chain = max(chain, time.Duration(n)*st)
	}
	left = time.Duration(live)
	if !p.Exhausted {
		per := s.StepsPerTrial(s.Survival(p))
		if s.Measured {
			const prior = 3 // trials' worth of weight on a full trial
			per = (prior*float64(s.Steps) + float64(p.EndedSteps)) / float64(prior+p.Ended)
		}
		keep := s.Survival(p)
		rest := float64(s.Trials)*per - float64(p.Steps) - float64(liveSteps)
		left += time.Duration(max(rest, 0) * float64(p.StepTime))
		attempts := float64(s.Trials)*s.AttemptsPerTrial(keep) - float64(p.Attempts)
		left += time.Duration(max(attempts, 0) * float64(p.Overhead))
		slow := max(p.Slow, p.StepTime)
		tail := time.Duration(max(s.Steps-p.Lowest, 0)) * slow
		if s.Promote {
			for _, r := range s.Rungs {
				if r >= p.Lowest {
					tail += p.Overhead // a resume at each rung above
				}
			}
		}
		chain = max(chain, tail+p.Overhead)
	}
	return left, chain
}
