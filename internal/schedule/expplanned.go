package schedule

import (
	"sync"
	"time"
)

// ExpPlanned is Virga's experiment policy. It sees the experiment as Lanes
// parallel jobs (one per trial it may run at once), each with an equal share
// of the on-demand time the experiment still needs (LaneLeft, with a
// margin), and decides each trial's lane with Planned, the single-job policy
// that minimises the expected cost of meeting the deadline under a Markov
// model of the spot pool the trial runs on or would get. A waiting trial the
// searcher promoted past its last rung (Final) gets the on-demand slots the
// lanes ask for before a trial still exploring, which takes spot capacity
// instead: preempting the trial the experiment ends with delays the end,
// while exploration trials run in parallel and absorb reclaims.
//
// A search's work is an estimate, and an uncertain one: the path of an
// asynchronous search changes with the order its trials finish in, which
// the placement changes (the same search can take from 0.6 to 1.6 times the
// node-hours under another placement), and the estimate rests on what the
// trials did so far. So the margin Virga keeps grows with that uncertainty
// (UncertainMargin): the safety net's margin, plus a share that is large
// while little of the search is done and shrinks as the done work grows
// against the work left. Every trial runs on on-demand capacity while the
// time to the deadline does not cover the on-demand time needed with that
// margin: at the start of a search (nothing measured yet) with a tight
// deadline, it runs as on-demand only would, and leaves on-demand capacity
// only once enough of the search is done for the slack to cover what is
// left with its uncertainty. Once the experiment's safety net fires
// (MustOnDemand, with the fixed margin), every trial stays on on-demand
// capacity for good, as the baselines' do: a placement that keeps changing
// near the deadline changes the search's path too.
//
// While the lanes wait for spot capacity, the experiment does not fall
// behind Uniform Progress's line (from nothing at submission to all its
// estimated work at the deadline): waiting trials start on on-demand
// capacity when it is behind.
//
// A trial moves to on-demand capacity when its lane says so; it leaves
// on-demand capacity (for spot capacity, or to wait) only at a checkpoint,
// so that no work is thrown away for a saving, and, while the searcher may
// pause it at a rung ahead (Trial.PauseAhead: promote mode), only there: a
// paused trial leaves its node anyway and is placed again, so a move before
// the rung pays a restart (its overhead, and the trial's delay) to save the
// price of the few steps to it, and the restart changes the order in which
// the trials' results reach the searcher (on the capacity benchmark's
// search, asynchronous successive halving then promoted more: such moves
// made it run up to a quarter more steps). Without a deadline it is
// ExpGreedy: spot capacity only.
//
// An ExpPlanned is safe for concurrent use; it keeps one Planned (and its
// plans) per spot pool.
type ExpPlanned struct {
	mu    sync.Mutex
	plans map[string]*Planned
}

// Name implements ExperimentPolicy.
func (*ExpPlanned) Name() string { return "virga" }

// planTicks bounds the decision intervals of a plan's horizon: the plan's
// tick is the experiment's decision interval, or its deadline over
// planTicks when that is longer.
const planTicks = 400

// planned returns the Planned of a spot pool.
func (p *ExpPlanned) planned(pool string) *Planned {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.plans == nil {
		p.plans = map[string]*Planned{}
	}
	pl := p.plans[pool]
	if pl == nil {
		pl = &Planned{}
		p.plans[pool] = pl
	}
	return pl
}

// Place implements ExperimentPolicy.
func (p *ExpPlanned) Place(e *Experiment, moves []Move) []Move {
	pl := newPlacer(e)
	od := e.onDemandPool()
	if e.Deadline <= 0 || od < 0 {
		return ExpGreedy{}.Place(e, moves)
	}
	if e.MustOnDemand() || e.uncertainNet() {
		return allOnDemand(e, pl, moves)
	}
	margin := e.UncertainMargin()
	tick := max(e.Tick, (e.Deadline/planTicks+time.Second-1)/time.Second*time.Second)
	// The plan depends on the checkpoint interval in whole ticks only: keep
	// the key of the plans steady as the measured step time moves.
	ckpt := (e.Checkpoint + tick/2) / tick * tick
	lanes := time.Duration(e.onDemandLanes())
	laneDone, laneLeft := e.Done/lanes, time.Duration(float64(e.LaneLeft())*(1+margin))

	// spotFor returns the spot pool a trial would be modelled on: the one it
	// runs on, else the cheapest that has room now, else the most available.
	spotFor := func(t *Trial) (int, bool) {
		if e.spotRunning(t) {
			q := &e.Pools[t.Pool]
			return t.Pool, q.Up && !q.Reclaiming
		}
		best := -1
		for _, i := range pl.order {
			q := &e.Pools[i]
			if q.Spot && q.Up && !q.Reclaiming && pl.free[i] > 0 {
				return i, true
			}
			if q.Spot && (best < 0 || q.Stats.Available > e.Pools[best].Stats.Available) {
				best = i
			}
		}
		return best, false
	}
	decide := func(t *Trial, work, done time.Duration) Instance {
		s, up := spotFor(t)
		if s < 0 {
			return OnDemand
		}
		sp, o := &e.Pools[s], &e.Pools[od]
		j := Job{
			Elapsed: e.Elapsed, Deadline: e.Deadline, Work: work, Done: done, Unsaved: t.Unsaved,
			Starting: t.Starting, SpotUp: up, Overhead: max(sp.Overhead, o.Overhead), Tick: tick,
			Checkpoint: ckpt, Pool: sp.Stats, SpotPrice: sp.Price, OnDemandPrice: o.Price,
		}
		switch {
		case e.spotRunning(t):
			j.Running = Spot
		case t.Pool >= 0:
			j.Running = OnDemand
		}
		d := p.planned(sp.Name).Decide(&j)
		if d == None && up {
			// Waiting costs the same as running on spot capacity later
			// (ties go to waiting): run now, so that the search learns
			// sooner and the estimate firms up.
			d = Spot
		}
		return d
	}

	// 1. Trials that run follow their lane (and, for a Final trial, its
	// own job when that needs on-demand capacity).
	dec := make([]Instance, len(e.Trials))
	var waiting []int
	wantOD := 0
	for i := range e.Trials {
		t := &e.Trials[i]
		d := decide(t, laneDone+laneLeft, laneDone)
		if t.Final && d != OnDemand && decide(t, t.Done+t.Left, t.Done) == OnDemand {
			d = OnDemand
		}
		dec[i] = d
		if t.Waiting() {
			waiting = append(waiting, i)
			if d == OnDemand {
				wantOD++
			}
			continue
		}
		switch {
		case d == OnDemand && e.spotRunning(t):
			if q := pl.take(false); q >= 0 {
				pl.release(t)
				moves = append(moves, Move{t.ID, q})
			}
		case !t.AtCheckpoint():
			// Leaving on-demand capacity can wait for the next checkpoint.
		case t.PauseAhead && e.onDemandRunning(t):
			// And for the trial's next rung, where it leaves its node
			// anyway if paused, and is placed again.
		case d == Spot && e.onDemandRunning(t):
			if q := pl.take(true); q >= 0 {
				pl.release(t)
				moves = append(moves, Move{t.ID, q})
			}
		case d == None:
			pl.release(t)
			moves = append(moves, Move{t.ID, -1})
		}
	}

	// 2. Waiting trials: as many on-demand slots as their lanes ask for,
	// Final trials first; the others take spot capacity unless their lane
	// says to wait.
	if len(waiting) == 0 {
		return moves
	}
	order := make([]int, 0, len(waiting))
	for _, i := range waiting {
		if e.Trials[i].Final {
			order = append(order, i)
		}
	}
	for _, i := range waiting {
		if !e.Trials[i].Final {
			order = append(order, i)
		}
	}
	// While its lane waits for spot capacity, a trial starts on on-demand
	// capacity if the experiment is behind the line from nothing at
	// submission to all its work at the deadline (Uniform Progress's rule):
	// a search that falls behind on an estimate that may be too low has
	// less time left to find out.
	behind := e.Done < time.Duration(float64(e.Done+e.Left)*min(float64(e.Elapsed)/float64(e.Deadline), 1))
	for _, i := range order {
		t := &e.Trials[i]
		if wantOD > 0 {
			wantOD--
			if q := pl.take(false); q >= 0 {
				moves = append(moves, Move{t.ID, q})
				continue
			}
		}
		q := -1
		if dec[i] != None {
			q = pl.take(true)
		}
		if q < 0 && behind {
			q = pl.take(false)
		}
		if q >= 0 {
			moves = append(moves, Move{t.ID, q})
		}
	}
	return moves
}
