package schedule

import (
	"math"
	"slices"
	"time"
)

// This file holds the experiment-level placement policies: where each trial
// of a search (or a single training job) that waits for a node or holds one
// should run now, across named pools of spot and on-demand capacity, so that
// the experiment finishes by its deadline, within its budget, at the least
// cost. A policy is a pure function of an Experiment snapshot; the simulator
// (internal/sim) and the control loop build the snapshot, ask the policy,
// keep the moves Feasible allows and carry them out.

// Experiment is an experiment's situation at a decision point. Times are
// durations since submission; work is node time at the speed of the pools'
// nodes (all pools are taken to be equally fast).
type Experiment struct {
	Elapsed  time.Duration // since submission
	Deadline time.Duration // since submission; 0 means none
	// Budget is the most the experiment may cost in USD (0: no limit);
	// Spent what it has cost so far, running attempts up to now included
	// (the control loop fills it in only when there is a budget: nothing
	// else decides on it).
	Budget, Spent float64
	// Tick is the decision interval: the next decision comes at the latest
	// this much later.
	Tick time.Duration
	// Checkpoint is the work between two checkpoints of a trial (its step
	// time when it checkpoints at every report); 0 means progress is kept
	// at a reclaim.
	Checkpoint time.Duration
	// Lanes is how many trials may run at once (max_concurrent).
	Lanes int
	// Done is the work done and kept by all trials so far; Left the
	// estimate of the work still to do (EstimateWork), all trials summed;
	// Chain the longest part of it that must run in sequence (the work of
	// the last trial to finish), so that no number of nodes finishes the
	// experiment in under Chain.
	Done, Left, Chain time.Duration
	// Trials are the trials that wait for a node or hold one, in the order
	// the experiment would start them; Pools are the pools they may use.
	Trials []Trial
	Pools  []Pool
	// Margin is the share of LaneLeft the safety net keeps in hand (0:
	// DefaultMargin).
	Margin float64
	// Committed says the safety net fired at an earlier decision: for the
	// baselines, every trial then stays on on-demand capacity, as a job
	// does once it switched (MustOnDemand stays true). The caller keeps it:
	// it sets it once MustOnDemand returned true.
	Committed bool
}

// Trial is one trial of an Experiment that waits for a node or holds one.
type Trial struct {
	ID int64
	// Pool is the index in Experiment.Pools of the pool the trial runs on,
	// or -1 while it waits.
	Pool int
	// Starting is the restart overhead still to pay on its pool; Unsaved
	// the work a preemption now would throw away.
	Starting, Unsaved time.Duration
	// Done is the work the trial has done and kept; Left the work to its end
	// should the searcher never stop it early.
	Done, Left time.Duration
	// Final says the searcher has promoted the trial past its last rung: it
	// runs to its end, and the experiment ends no earlier than it does.
	Final bool
	// PauseAhead says the searcher pauses the trial at a rung before its
	// end, unless it promotes it at once there (SearchShape.PauseAhead:
	// a rung-based stopper in promote mode, the trial not Final): paused, it
	// leaves its node.
	PauseAhead bool
}

// Waiting reports whether the trial waits for a node.
func (t *Trial) Waiting() bool { return t.Pool < 0 }

// AtCheckpoint reports whether a running trial would lose nothing if it
// stopped now: it has paid its restart overhead and saved all its work.
func (t *Trial) AtCheckpoint() bool { return t.Pool >= 0 && t.Starting == 0 && t.Unsaved == 0 }

// Pool is one pool of nodes as a policy sees it. Prices are per trial-hour
// (the node's price times the share of a node a trial takes).
type Pool struct {
	Name string
	Spot bool
	// Slots is how many trials the pool can hold at once; Free how many more
	// it can take now.
	Slots, Free int
	// Up says capacity can be had now (always, on on-demand pools);
	// Reclaiming that a reclaim is announced: a trial started now would be
	// preempted within the warning.
	Up, Reclaiming bool
	Price          float64
	// Overhead is the restart overhead: from asking for a node to a trial
	// making progress on it, billed.
	Overhead time.Duration
	// MinCost is the least a start on the pool costs (its billing minimum).
	MinCost float64
	Stats   PoolStats // a spot pool's reliability
}

// Move asks for a trial to run on a pool: to start there if it waits, to
// stop and start there if it runs elsewhere. Pool -1 stops a running trial:
// it waits again, resuming from its checkpoint.
type Move struct {
	Trial int64
	Pool  int
}

// ExperimentPolicy places an experiment's trials on pools.
type ExperimentPolicy interface {
	Name() string
	// Place appends to moves what should change now and returns it: trials
	// not named stay as they are (waiting, or where they run). It must not
	// change e, nor keep it or its slices once it returns (the control loop
	// reuses them for its next snapshot). Moves Feasible refuses are dropped, so a policy may ask for
	// a pool without counting its free slots exactly.
	Place(e *Experiment, moves []Move) []Move
}

// Feasible keeps the moves that can be carried out, in order: the trial is
// in e and not moved twice, the pool is up, not being reclaimed, has a free
// slot (net of the moves kept before it), and a start there fits the budget
// (what is spent plus the pool's least cost). A move of a trial to the pool
// it runs on is dropped. It reuses moves' storage.
func Feasible(e *Experiment, moves []Move) []Move {
	free := make([]int, len(e.Pools))
	for i := range e.Pools {
		free[i] = e.Pools[i].Free
	}
	// Find the trials moved (usually few) in one pass over the trials.
	index := make(map[int64]int, len(moves))
	for _, m := range moves {
		index[m.Trial] = -1
	}
	for i := range e.Trials {
		if _, ok := index[e.Trials[i].ID]; ok {
			index[e.Trials[i].ID] = i
		}
	}
	seen := make(map[int64]bool, len(moves))
	out := moves[:0]
	committed := 0.0 // least costs of the starts kept
	for _, m := range moves {
		i := index[m.Trial]
		if i < 0 || seen[m.Trial] {
			continue
		}
		t := &e.Trials[i]
		if m.Pool == t.Pool || m.Pool < -1 || m.Pool >= len(e.Pools) || (m.Pool == -1 && t.Waiting()) {
			continue
		}
		if m.Pool >= 0 {
			p := &e.Pools[m.Pool]
			if !p.Up || p.Reclaiming || free[m.Pool] <= 0 {
				continue
			}
			if e.Budget > 0 && e.Spent+committed+p.MinCost > e.Budget {
				continue
			}
			free[m.Pool]--
			committed += p.MinCost
		}
		if t.Pool >= 0 {
			free[t.Pool]++
		}
		seen[m.Trial] = true
		out = append(out, m)
	}
	return out
}

// Remaining returns the time to the deadline (+Inf as a duration without one).
func (e *Experiment) Remaining() time.Duration {
	if e.Deadline <= 0 {
		return math.MaxInt64
	}
	return e.Deadline - e.Elapsed
}

// onDemandLanes is how many trials can run at once on on-demand capacity.
func (e *Experiment) onDemandLanes() int {
	slots := 0
	for i := range e.Pools {
		if !e.Pools[i].Spot {
			slots += e.Pools[i].Slots
		}
	}
	return max(1, min(e.Lanes, slots))
}

// LaneLeft is the time the experiment still needs on on-demand capacity,
// overheads aside: Graham's bound for list scheduling, the work left but
// the chain spread over the trials that can run at once on on-demand
// pools, then the chain (trials wait for one another's results: the pool
// is not always full, and the last trial runs alone).
func (e *Experiment) LaneLeft() time.Duration {
	return max(e.Left-e.Chain, 0)/time.Duration(e.onDemandLanes()) + e.Chain
}

// onDemandPool returns the cheapest on-demand pool, or -1.
func (e *Experiment) onDemandPool() int {
	best := -1
	for i := range e.Pools {
		p := &e.Pools[i]
		if !p.Spot && (best < 0 || p.Price < e.Pools[best].Price) {
			best = i
		}
	}
	return best
}

// overhead is the restart overhead of the cheapest on-demand pool (0 if none).
func (e *Experiment) overhead() time.Duration {
	if i := e.onDemandPool(); i >= 0 {
		return e.Pools[i].Overhead
	}
	return 0
}

// DefaultMargin is the share of the on-demand time an experiment still
// needs (LaneLeft) that the safety net keeps in hand by default: unlike a
// job's, a search's work is an estimate, and the path an adaptive search
// takes changes with the order its trials finish in.
const DefaultMargin = 0.25

// MustOnDemand is the safety net of the baselines (Greedy, Uniform
// Progress) at the level of the experiment: move every trial to on-demand
// capacity, and keep it there (Committed), once waiting one more interval,
// or losing the unsaved work of a preemption in it, could make the deadline
// unreachable even on on-demand capacity (NearDeadline).
func (e *Experiment) MustOnDemand() bool {
	return e.Committed || e.NearDeadline()
}

// NearDeadline reports whether the experiment is at its safety net now:
// the time to the deadline, less a decision interval and a checkpoint
// interval, no longer covers the on-demand time it still needs (LaneLeft
// and a restart) with a margin for the estimate's error. Never without a
// deadline or on-demand pools.
func (e *Experiment) NearDeadline() bool {
	if e.Deadline <= 0 || e.onDemandPool() < 0 {
		return false
	}
	need := e.LaneLeft()
	margin := e.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	slack := e.Remaining() - need - e.overhead() - time.Duration(margin*float64(need))
	return slack < e.Tick+e.Checkpoint
}

// placer hands out free slots while a policy decides.
type placer struct {
	e     *Experiment
	free  []int
	order []int // pool indices by price, cheapest first
}

func newPlacer(e *Experiment) *placer {
	p := &placer{e: e, free: make([]int, len(e.Pools)), order: make([]int, len(e.Pools))}
	for i := range e.Pools {
		p.free[i] = e.Pools[i].Free
		p.order[i] = i
	}
	slices.SortStableFunc(p.order, func(a, b int) int {
		switch pa, pb := e.Pools[a].Price, e.Pools[b].Price; {
		case pa < pb:
			return -1
		case pa > pb:
			return 1
		}
		return 0
	})
	return p
}

// take returns the cheapest pool of the market that can take a trial now
// and counts the slot taken, or -1.
func (p *placer) take(spot bool) int {
	for _, i := range p.order {
		q := &p.e.Pools[i]
		if q.Spot == spot && q.Up && !q.Reclaiming && p.free[i] > 0 {
			p.free[i]--
			return i
		}
	}
	return -1
}

// release gives back the slot of a trial that moves away.
func (p *placer) release(t *Trial) {
	if t.Pool >= 0 {
		p.free[t.Pool]++
	}
}

// spotRunning reports whether t runs on a spot pool.
func (e *Experiment) spotRunning(t *Trial) bool { return t.Pool >= 0 && e.Pools[t.Pool].Spot }

// onDemandRunning reports whether t runs on an on-demand pool.
func (e *Experiment) onDemandRunning(t *Trial) bool { return t.Pool >= 0 && !e.Pools[t.Pool].Spot }

// allOnDemand moves every trial not on on-demand capacity there, while
// there is room.
func allOnDemand(e *Experiment, pl *placer, moves []Move) []Move {
	for i := range e.Trials {
		t := &e.Trials[i]
		if e.onDemandRunning(t) {
			continue
		}
		if q := pl.take(false); q >= 0 {
			pl.release(t)
			moves = append(moves, Move{t.ID, q})
		}
	}
	return moves
}

// ExpOnDemandOnly runs every trial on the cheapest on-demand pool with room.
type ExpOnDemandOnly struct{}

// Name implements ExperimentPolicy.
func (ExpOnDemandOnly) Name() string { return "on-demand" }

// Place implements ExperimentPolicy.
func (ExpOnDemandOnly) Place(e *Experiment, moves []Move) []Move {
	return allOnDemand(e, newPlacer(e), moves)
}

// ExpGreedy starts trials on the cheapest spot pool that has room, and
// otherwise lets them wait, until the experiment's safety net
// (MustOnDemand) moves every trial to on-demand capacity.
type ExpGreedy struct{}

// Name implements ExperimentPolicy.
func (ExpGreedy) Name() string { return "greedy" }

// Place implements ExperimentPolicy.
func (ExpGreedy) Place(e *Experiment, moves []Move) []Move {
	pl := newPlacer(e)
	if e.MustOnDemand() {
		return allOnDemand(e, pl, moves)
	}
	for i := range e.Trials {
		t := &e.Trials[i]
		if !t.Waiting() {
			continue
		}
		if q := pl.take(true); q >= 0 {
			moves = append(moves, Move{t.ID, q})
		}
	}
	return moves
}

// ExpUniformProgress is Can't Be Late's Uniform Progress (Wu et al., NSDI
// 2024, §4) applied to the experiment's work J = Done + Left: the experiment
// should make progress at least along the line from none at submission to
// all of it at the deadline D, ep(t) = t·J/D. Trials run on spot capacity
// whenever some has room; when none has, waiting trials start on on-demand
// capacity while the experiment is behind the line. A trial on on-demand
// capacity stays there while no spot pool has room for it, whatever the
// progress; with room on spot, it moves there (at its next checkpoint) once
// the experiment is ahead of where the line will be two restart overheads
// of time later, Done > ep(Elapsed + 2·overhead) (the hysteresis). With
// Plain, there is no hysteresis: it moves as soon as spot capacity has
// room. The safety net applies as for ExpGreedy.
type ExpUniformProgress struct {
	// Plain leaves on-demand capacity for spot as soon as spot has room
	// (the paper's variant without the hysteresis).
	Plain bool
}

// Name implements ExperimentPolicy.
func (u ExpUniformProgress) Name() string {
	if u.Plain {
		return "uniform-progress-plain"
	}
	return "uniform-progress"
}

// Place implements ExperimentPolicy.
func (u ExpUniformProgress) Place(e *Experiment, moves []Move) []Move {
	pl := newPlacer(e)
	if e.MustOnDemand() {
		return allOnDemand(e, pl, moves)
	}
	// line is the work done at elapsed time t on the uniform progress line.
	line := func(t time.Duration) time.Duration {
		if e.Deadline <= 0 {
			return 0
		}
		return time.Duration(float64(e.Done+e.Left) * min(float64(t)/float64(e.Deadline), 1))
	}
	behind := e.Done < line(e.Elapsed)
	leave := u.Plain || e.Done > line(e.Elapsed+2*e.overhead())
	for i := range e.Trials {
		t := &e.Trials[i]
		switch {
		case e.onDemandRunning(t):
			if !leave || !t.AtCheckpoint() {
				continue
			}
			if q := pl.take(true); q >= 0 {
				pl.release(t)
				moves = append(moves, Move{t.ID, q})
			}
		case t.Waiting():
			if q := pl.take(true); q >= 0 {
				moves = append(moves, Move{t.ID, q})
			} else if behind {
				if q := pl.take(false); q >= 0 {
					moves = append(moves, Move{t.ID, q})
				}
			}
		}
	}
	return moves
}

// ExperimentPolicies returns a new instance of each built-in experiment
// policy, in the order they are compared: the baselines, then Virga's.
func ExperimentPolicies() []ExperimentPolicy {
	return []ExperimentPolicy{ExpOnDemandOnly{}, ExpGreedy{}, ExpUniformProgress{}, &ExpPlanned{}}
}

// ExperimentPolicyNamed returns a new instance of the built-in experiment policy
// named name, or nil.
func ExperimentPolicyNamed(name string) ExperimentPolicy {
	for _, p := range ExperimentPolicies() {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// Spread scales the share of the margin that covers the uncertainty of a
// search's work (UncertainMargin).
const Spread = 0.06

// UncertainMargin is the share of the on-demand time an experiment still
// needs (LaneLeft) that Virga keeps in hand: the safety net's margin (Margin,
// else DefaultMargin), plus Spread x sqrt(Left / Done), the relative error
// of an estimate made from Done worth of measurements of a search with Left
// still to do (the error of a mean falls as the square root of what it is
// measured on, and what is left to run grows it). +Inf while nothing is
// done: nothing is known of the search yet.
func (e *Experiment) UncertainMargin() float64 {
	margin := e.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	if e.Left <= 0 {
		return margin
	}
	if e.Done <= 0 {
		return math.Inf(1)
	}
	return margin + Spread*math.Sqrt(float64(e.Left)/float64(e.Done))
}

// uncertainNet reports whether the time to the deadline, less a decision
// interval and a checkpoint interval, no longer covers the on-demand time
// the experiment still needs (LaneLeft and a restart) with UncertainMargin.
// Never without a deadline or on-demand pools.
func (e *Experiment) uncertainNet() bool {
	if e.Deadline <= 0 || e.onDemandPool() < 0 {
		return false
	}
	need := float64(e.LaneLeft()+e.overhead()) + e.UncertainMargin()*float64(e.LaneLeft())
	return float64(e.Remaining()-e.Tick-e.Checkpoint) < need
}
