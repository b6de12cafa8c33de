package schedule

import (
	"sync"
	"time"
)

// ExpPlanned is Virga's experiment policy. It sees the experiment as Lanes
// parallel jobs (one per trial it may run at once), each with an equal share
// of the on-demand time the experiment still needs (LaneLeft, with the
// safety net's margin), and decides each trial's lane with Planned, the
// single-job policy that minimises the expected cost of meeting the
// deadline under a Markov model of the spot pool the trial runs on or would
// get. It then spends the capacity by what the searcher knows of the
// trials:
//   - a waiting trial the searcher promoted past its last rung (Final) gets
//     the on-demand slots the lanes ask for before a trial still exploring,
//     which takes spot capacity instead: preempting the trial the experiment
//     ends with delays the end, while exploration trials run in parallel and
//     absorb reclaims;
//   - while the deadline is near (NearDeadline, where the baselines' safety
//     net fires), no trial waits: Final trials run on on-demand capacity, and
//     the others on spot capacity while a pool has room, else on
//     on-demand. A reclaim then costs an exploration trial its step under
//     way and a restart, which the net's margin covers; once half the margin
//     is spent (the slack beyond half of it is under a decision interval, a
//     step and a restart), every trial moves to on-demand capacity, as
//     ExpGreedy's do.
//
// A trial moves to on-demand capacity when its lane says so; it leaves
// on-demand capacity (for spot capacity, or to wait) only at a checkpoint,
// so that no work is thrown away for a saving. Unlike the baselines it does
// not commit to on-demand capacity for good when the net fires: a search's
// estimate moves as trials report, and a deadline that was near may not be
// any more. Without a deadline it is ExpGreedy: spot capacity only.
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
	margin := e.Margin
	if margin <= 0 {
		margin = DefaultMargin
	}
	if e.NearDeadline() {
		// Spot capacity for exploration while half the margin is left.
		need := time.Duration(float64(e.LaneLeft())*(1+margin/2)) + e.overhead()
		if e.Remaining()-need < e.Tick+e.Checkpoint+e.overhead() {
			return allOnDemand(e, pl, moves)
		}
		return nearDeadline(e, pl, moves)
	}
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
	for _, i := range order {
		t := &e.Trials[i]
		if wantOD > 0 {
			wantOD--
			if q := pl.take(false); q >= 0 {
				moves = append(moves, Move{t.ID, q})
				continue
			}
		}
		if dec[i] == None {
			continue
		}
		if q := pl.take(true); q >= 0 {
			moves = append(moves, Move{t.ID, q})
		}
	}
	return moves
}

// nearDeadline places trials once the safety net has fired: Final trials on
// on-demand capacity (a spot one moves at its next checkpoint), the others
// on spot capacity while some has room and on-demand otherwise; no trial
// waits.
func nearDeadline(e *Experiment, pl *placer, moves []Move) []Move {
	for i := range e.Trials {
		t := &e.Trials[i]
		switch {
		case t.Final && e.spotRunning(t) && (t.AtCheckpoint() || e.Pools[t.Pool].Reclaiming):
			if q := pl.take(false); q >= 0 {
				pl.release(t)
				moves = append(moves, Move{t.ID, q})
			}
		case t.Waiting():
			q := -1
			if !t.Final {
				q = pl.take(true)
			}
			if q < 0 {
				q = pl.take(false)
			}
			if q >= 0 {
				moves = append(moves, Move{t.ID, q})
			}
		}
	}
	return moves
}
