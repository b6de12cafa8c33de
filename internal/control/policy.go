package control

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

// This file runs an experiment policy (Config.Policy, a
// schedule.ExperimentPolicy) in the control loop, for the experiments that
// have a deadline, on a backend with pools. The loop builds the same
// schedule.Experiment snapshot the simulator (internal/sim) builds, from
// live data, asks the policy, keeps the moves schedule.Feasible allows and
// carries them out: a waiting trial starts on its pool; a running trial the
// policy moves is stopped gracefully (stopMove) and waits again, queued, so
// that the policy places it (on its new pool, where a slot is kept for it
// meanwhile) at a later pass and it resumes from its checkpoint there. Every change is committed before it is acted
// on, as for the rest of the loop.

// PoolInfo is what an experiment policy knows of a pool beyond its
// backend.PoolStatus. internal/server builds it from a capacity file.
type PoolInfo struct {
	// Spot says the pool buys spot capacity.
	Spot bool
	// Node is what one node offers: a trial pays for its share of it.
	Node virga.Resources
	// Price is the price in USD per node-hour at a time; nil means 0.
	Price func(time.Time) float64
	// RestartOverhead is the time from asking for a node to a trial making
	// progress on it.
	RestartOverhead time.Duration
	// MinBilled is the least time a start on the pool is billed for (its
	// billing minimum, or the restart overhead rounded up to its increment).
	MinBilled time.Duration
	// Stats is a spot pool's reliability (schedule.StatsOfPool).
	Stats schedule.PoolStats
}

// expPolicyState is what the loop keeps of an experiment for its policy.
type expPolicyState struct {
	// committed is schedule.Experiment.Committed: the safety net fired at
	// an earlier decision (kept in memory, as the simulator keeps it).
	committed bool
	// decided and sig are when the policy was last asked and a digest of
	// what it saw: it is asked again at once when that changes, and at
	// least every TickInterval.
	decided time.Time
	sig     uint64
	// late says the experiment was told its deadline cannot be met.
	late bool
	// fallback says the policy cannot decide yet (it was logged once).
	fallback string
	// stepSum and steps sum the measured steps of all trials (time between
	// two reports of one attempt); saveSum and saves the intervals between
	// two checkpoints of one attempt.
	stepSum time.Duration
	steps   int64
	saveSum time.Duration
	saves   int
	// hint is what the estimate submitted with the experiment says of its
	// trials, for the policy to decide from before its own are measured.
	hint estimateHint
	// buf keeps the last snapshot's slices, for the next to reuse: a
	// snapshot at every pass of a large search would otherwise allocate
	// its trials anew each time.
	buf snapshotBuf
}

// snapshotBuf is the storage of an experiment's policy snapshot, reused
// from one pass to the next (a policy keeps nothing of a snapshot:
// schedule.ExperimentPolicy).
type snapshotBuf struct {
	pools  []schedule.Pool
	trials []schedule.Trial
	views  []*trialState
	live   []schedule.LiveTrial
	means  []time.Duration
}

// estimateHint is what an estimate submitted with an experiment (virga
// estimate --json: steps_per_trial, step_time) says of its trials.
type estimateHint struct {
	steps int64
	step  time.Duration
}

// hintOf reads an estimate's steps per trial and step time; what it lacks
// (or an estimate that is not virga estimate's) is zero.
func hintOf(estimate []byte) estimateHint {
	var r struct {
		Steps    int64         `json:"steps_per_trial"`
		StepTime time.Duration `json:"step_time"`
	}
	if len(estimate) == 0 || json.Unmarshal(estimate, &r) != nil {
		return estimateHint{}
	}
	return estimateHint{steps: max(r.Steps, 0), step: max(r.StepTime, 0)}
}

// trialSpeed is a trial's measured speed, from the times of its reports.
type trialSpeed struct {
	attempt int64 // the attempt of the last report
	step    int64 // its step
	at      time.Time
	savedAt time.Time // the attempt's last checkpoint (zero: none yet)
	stepSum time.Duration
	steps   int64
	// first is when the attempt of the next report began making progress
	// (its start plus its pool's restart overhead; zero: unknown): its
	// first report measures a step from then.
	first time.Time
}

// progressFrom is when ts's attempt began making progress: its start plus
// its pool's restart overhead, for the experiment policy; zero when
// unknown (no policy, or a pool it knows nothing of).
func (c *Controller) progressFrom(ts *trialState) time.Time {
	a := ts.attempt
	if a == nil || !c.usePolicy(ts.exp) {
		return time.Time{}
	}
	info, ok := c.cfg.PoolInfo[a.Pool]
	if !ok {
		return time.Time{}
	}
	from := a.StartedAt
	if from.IsZero() {
		from = ts.started
	}
	return from.Add(info.RestartOverhead)
}

// report records a report of attempt at step, at time at, which saved a
// checkpoint when saved.
func (s *trialSpeed) report(es *expState, attempt, step int64, at time.Time, saved bool) {
	switch {
	case s.attempt == attempt && step > s.step && at.After(s.at):
		d := at.Sub(s.at)
		s.stepSum += d
		s.steps += step - s.step
		es.pol.stepSum += d
		es.pol.steps += step - s.step
	case s.attempt != attempt && !s.first.IsZero() && at.After(s.first):
		// An attempt's first report: one step since it began making
		// progress (with a search that restarts its trials at every rung,
		// most steps are first steps).
		d := at.Sub(s.first)
		s.stepSum += d
		s.steps++
		es.pol.stepSum += d
		es.pol.steps++
	}
	s.first = time.Time{}
	if s.attempt != attempt {
		s.savedAt = time.Time{}
	}
	if saved {
		if !s.savedAt.IsZero() && at.After(s.savedAt) {
			es.pol.saveSum += at.Sub(s.savedAt)
			es.pol.saves++
		}
		s.savedAt = at
	}
	s.attempt, s.step, s.at = attempt, step, at
}

// recover rebuilds the measured speed from the trial's metrics and
// checkpoints, after a restart of the server, as if its reports came again.
func (s *trialSpeed) recover(es *expState, ms []virga.Metric, ckpts []virga.Checkpoint) {
	ms = slices.Clone(ms)
	slices.SortStableFunc(ms, func(a, b virga.Metric) int { return a.Time.Compare(b.Time) })
	for _, m := range ms {
		saved := slices.ContainsFunc(ckpts, func(ck virga.Checkpoint) bool { return ck.AttemptID == m.AttemptID && ck.Step == m.Step })
		s.report(es, m.AttemptID, m.Step, m.Time, saved)
	}
}

// stepTime is the trial's mean step time (0: none measured).
func (s *trialSpeed) stepTime() time.Duration {
	if s.steps == 0 {
		return 0
	}
	return s.stepSum / time.Duration(s.steps)
}

// usePolicy reports whether the experiment policy places es's trials.
func (c *Controller) usePolicy(es *expState) bool {
	return c.cfg.Policy != nil && !es.spec.Deadline.IsZero()
}

// stepsPerTrial is the steps of a trial that runs to its end: the
// searcher's max_resource, else the most steps a completed trial of es
// reached, else the estimate's; 0 when none is known.
func stepsPerTrial(es *expState) int64 {
	if m := es.spec.Searcher.Int("max_resource", 0); m > 0 {
		return m
	}
	var most int64
	for _, ts := range es.trials {
		if ts.t.State == virga.TrialCompleted {
			most = max(most, ts.t.Step)
		}
	}
	if most == 0 {
		return es.pol.hint.steps
	}
	return most
}

// stepTime is es's mean measured step time, else the estimate's; 0 when
// neither is known.
func stepTime(es *expState) time.Duration {
	if es.pol.steps == 0 {
		return es.pol.hint.step
	}
	return es.pol.stepSum / time.Duration(es.pol.steps)
}

// keptStep is the step a trial would go on from: the step it reported
// while it runs or once it ended, its checkpoint's while it waits.
func keptStep(ts *trialState) int64 {
	t := ts.t
	if ts.attempt != nil || t.State.Terminal() || t.State == virga.TrialPaused {
		return t.Step
	}
	switch {
	case t.Checkpoint == "":
		return 0
	case t.Checkpoint == t.ParentCheckpoint:
		return t.ParentStep
	}
	for _, ck := range ts.ckpts {
		if ck.ID == t.Checkpoint {
			return ck.Step
		}
	}
	return t.Step
}

// fitCount is how many times need fits in have (a large number when need
// is zero).
func fitCount(have, need virga.Resources) int {
	n := math.MaxInt32
	if need.CPU > 0 {
		n = min(n, int(math.Floor(have.CPU/need.CPU+1e-9)))
	}
	if need.MemoryMB > 0 {
		n = min(n, int(have.MemoryMB/need.MemoryMB))
	}
	if need.GPU > 0 {
		n = min(n, have.GPU/need.GPU)
	}
	return max(n, 0)
}

// policyView is a snapshot and what its indices stand for.
type policyView struct {
	e      schedule.Experiment
	trials []*trialState // by Trial.ID-1
	// sig sums up what the policy decides from but the clock: the trials,
	// where they run, and the pools' state (an FNV-1a hash, summed as the
	// snapshot is built). The policy is asked again when it changes.
	sig uint64
}

// notReady says why the policy cannot decide for es yet ("": it can): the
// estimate of the work left needs the steps of a trial and a step time,
// measured or from the estimate submitted with the experiment.
func notReady(es *expState) string {
	if stepsPerTrial(es) <= 0 {
		return "the steps of a trial are not known yet (the searcher has no max_resource, no trial has completed, and no estimate with steps_per_trial came with the experiment)"
	}
	if stepTime(es) <= 0 {
		return "no step time is measured yet (no trial has reported twice in one attempt, and no estimate with a step_time came with the experiment)"
	}
	return ""
}

// snapshot builds es's schedule.Experiment now, as the simulator builds it
// (sim's experimentSim.snapshot), from the loop's live data. es must be
// ready (notReady).
func (c *Controller) snapshot(es *expState, pools []backend.PoolStatus, res virga.Resources, now time.Time) *policyView {
	steps := stepsPerTrial(es)
	step := stepTime(es)
	shape := schedule.ShapeOf(es.spec, steps)
	buf := &es.pol.buf
	v := &policyView{trials: buf.views[:0]}
	e := &v.e
	e.Pools, e.Trials = buf.pools[:0], buf.trials[:0]
	e.Elapsed = now.Sub(es.exp.CreatedAt)
	e.Deadline = es.spec.Deadline.Time(es.exp.CreatedAt).Sub(es.exp.CreatedAt)
	if c.cfg.Pricer != nil {
		e.Budget = es.spec.Budget // Spent once the policy is asked (schedulePolicy)
	}
	e.Tick = c.cfg.TickInterval
	e.Checkpoint = step
	if es.pol.saves > 0 {
		e.Checkpoint = es.pol.saveSum / time.Duration(es.pol.saves)
	}
	e.Lanes = es.spec.MaxConcurrent
	e.Committed = es.pol.committed

	// Pools, in the backend's order.
	var overhead time.Duration
	for _, ps := range pools {
		info, ok := c.cfg.PoolInfo[ps.Name]
		if !ok {
			info.Spot = ps.Preemptible
		}
		share := 1.0
		if info.Node != (virga.Resources{}) {
			if s, err := capacity.Share(res, info.Node); err == nil && s > 0 {
				share = s
			}
		}
		price := 0.0
		if info.Price != nil {
			price = info.Price(now) * share
		}
		overhead = max(overhead, info.RestartOverhead)
		e.Pools = append(e.Pools, schedule.Pool{
			Name: ps.Name, Spot: info.Spot, Slots: fitCount(ps.Capacity, res), Free: fitCount(ps.Free, res),
			Up: ps.Up, Reclaiming: ps.Reclaiming(now), Price: price, Overhead: info.RestartOverhead,
			MinCost: price * info.MinBilled.Hours(), Stats: info.Stats,
		})
	}

	// Trials, and the search's progress.
	prog := schedule.Progress{Lowest: math.MaxInt64, Overhead: overhead, Exhausted: es.exhausted, StepTime: step,
		Reached: make([]int, len(shape.Rungs)), Passed: make([]int, len(shape.Rungs)), Live: buf.live[:0]}
	// The settled trials' part (settled.go), then the others'.
	sums := es.settle(shape)
	prog.Steps += sums.steps
	e.Done += sums.done + time.Duration(sums.unmeasured)*step
	for k := range shape.Rungs {
		prog.Reached[k] += sums.reached[k]
		prog.Passed[k] += sums.passed[k]
	}
	prog.Attempts += sums.attempts
	prog.Ended += sums.ended
	prog.EndedSteps += sums.endedSteps
	for kept := range sums.lowest {
		prog.Lowest = min(prog.Lowest, kept)
	}
	means := buf.means[:0]
	sig := newFNV()
	for _, ts := range es.active {
		t := ts.t
		if ts.attempt != nil && ts.stopping == stopMove && ts.moveTo != "" {
			// A slot of the pool the trial is moving to is kept for it
			// while its attempt stops (the simulator moves a trial at once).
			if i := poolIndex(e.Pools, ts.moveTo); i >= 0 {
				e.Pools[i].Free = max(e.Pools[i].Free-1, 0)
			}
		}
		kept := keptStep(ts)
		mean := ts.speed.stepTime()
		own := mean
		if own > 0 {
			means = append(means, own)
		} else {
			own = step
		}
		done := max(kept-t.ParentStep, 0)
		prog.Steps += done
		e.Done += time.Duration(done) * own
		for k, r := range shape.Rungs {
			if t.Step >= r {
				prog.Reached[k]++
				if t.Step > r {
					prog.Passed[k]++
					if shape.Promote {
						prog.Attempts++ // resumed past the rung
					}
				}
			}
		}
		prog.Attempts++
		if t.State.Terminal() {
			prog.Ended++
			prog.EndedSteps += t.Step
			continue
		}
		prog.Lowest = min(prog.Lowest, kept)
		waiting := ts.attempt == nil && t.State == virga.TrialQueued
		if ts.attempt == nil && !waiting {
			continue // paused
		}
		prog.Live = append(prog.Live, schedule.LiveTrial{Step: kept, StepTime: mean})
		tr := schedule.Trial{ID: int64(len(v.trials) + 1), Pool: -1, Done: time.Duration(done) * own,
			Left: time.Duration(max(shape.Steps-kept, 0)) * own, Final: shape.Final(kept), PauseAhead: shape.PauseAhead(kept)}
		if waiting {
			if now.Before(ts.notBefore) {
				continue
			}
		} else {
			a := ts.attempt
			i := poolIndex(e.Pools, a.Pool)
			if i < 0 || ts.stopping != notStopping || a.Backend == apiBackend {
				continue // not the policy's to move
			}
			tr.Pool = i
			over := e.Pools[i].Overhead
			from := ts.started.Add(over) // progress starts after the restart overhead
			if ts.speed.attempt != a.ID {
				tr.Starting = max(from.Sub(now), 0) // no report yet
			}
			if ts.speed.attempt == a.ID && ts.speed.savedAt.After(from) {
				from = ts.speed.savedAt
			}
			tr.Unsaved = max(now.Sub(from), 0)
		}
		e.Trials = append(e.Trials, tr)
		v.trials = append(v.trials, ts)
		sig.trial(t.Seq, &tr)
	}
	for i := range e.Pools {
		sig.pool(&e.Pools[i])
	}
	v.sig = uint64(sig)
	if prog.Lowest == math.MaxInt64 {
		prog.Lowest = 0
	}
	if n := len(means) + len(sums.means); n > 0 {
		slices.Sort(means)
		prog.Slow = quantile(means, sums.means, min(n-1, int(math.Ceil(slowQuantile*float64(n)))-1))
	}
	e.Left, e.Chain = shape.EstimateWork(prog)
	buf.pools, buf.trials, buf.views, buf.live, buf.means = e.Pools, e.Trials, v.trials, prog.Live, means
	return v
}

// poolIndex is the index of the pool named name in pools, -1 if none.
func poolIndex(pools []schedule.Pool, name string) int {
	for i := range pools {
		if pools[i].Name == name {
			return i
		}
	}
	return -1
}

// slowQuantile is the quantile of the trials' mean step times taken as a
// slow trial's (schedule.Progress.Slow), as in the simulator.
const slowQuantile = 0.75

// fnv is a 64-bit FNV-1a hash summed a byte at a time (hash/fnv's, without
// a buffer of what it hashes).
type fnv uint64

func newFNV() fnv { return 14695981039346656037 }

func (h *fnv) byte(b byte) { *h = (*h ^ fnv(b)) * 1099511628211 }

func (h *fnv) varint(x int64) {
	var buf [binary.MaxVarintLen64]byte
	for _, b := range binary.AppendVarint(buf[:0], x) {
		h.byte(b)
	}
}

// trial adds a trial of the snapshot: its sequence number, its pool, and
// whether it is starting and at its last rung.
func (h *fnv) trial(seq int, t *schedule.Trial) {
	h.byte('t')
	h.varint(int64(seq))
	h.varint(int64(t.Pool))
	h.byte(flags(t.Starting > 0, t.Final))
}

// pool adds a pool of the snapshot: its slots, free slots, and whether it
// is up and reclaiming.
func (h *fnv) pool(p *schedule.Pool) {
	h.byte('p')
	h.varint(int64(p.Slots))
	h.varint(int64(p.Free))
	h.byte(flags(p.Up, p.Reclaiming))
}

// flags packs two booleans in a byte.
func flags(a, b bool) byte {
	var f byte
	if a {
		f |= 1
	}
	if b {
		f |= 2
	}
	return f
}

// schedulePolicy fills es's free concurrency with the searcher's proposals
// (they wait, queued), asks the experiment policy where its trials run and
// carries out its moves. It returns false when the policy cannot decide
// yet: the loop then places es's trials with Config.Place, and says so once.
func (c *Controller) schedulePolicy(it *iteration, es *expState, pools []backend.PoolStatus, free *virga.Resources, now time.Time) bool {
	res := resources(es.spec)
	if why := notReady(es); why != "" {
		if es.pol.fallback != why {
			es.pol.fallback = why
			c.log.Info("the experiment policy cannot place this experiment's trials yet; the first pool with room takes them",
				"experiment", es.exp.ID, "policy", c.cfg.Policy.Name(), "why", why)
		}
		return false
	}
	es.pol.fallback = ""
	// 1. Trials wait or run up to max_concurrent, as in the simulator.
	live := 0
	for _, ts := range es.active { // settled trials neither run nor wait
		if ts.attempt != nil || ts.t.State == virga.TrialQueued {
			live++
		}
	}
	for live < es.spec.MaxConcurrent {
		if ok, why := c.budgetAllowsNew(es, res, pools, now, 0); !ok {
			if live == 0 {
				c.stopForBudget(it, es, why, now)
				return true
			}
			break
		}
		if c.propose(it, es, running(es)) == nil {
			break
		}
		live++
	}
	// 2. Ask the policy, when what it sees changed or a tick has passed.
	v := c.snapshot(es, pools, res, now)
	e := &v.e
	if len(e.Trials) == 0 {
		c.maybeFinish(it, es)
		return true
	}
	sig := v.sig
	if sig == es.pol.sig && now.Sub(es.pol.decided) < c.cfg.TickInterval {
		return true
	}
	es.pol.sig, es.pol.decided = sig, now
	if e.Budget > 0 {
		// Pricing every running attempt is most of a snapshot's cost: it
		// is done only for a decision, and only with a budget (nothing
		// else decides on what was spent).
		e.Spent = c.committed(es, now, 0)
	}
	if need := e.LaneLeft(); !es.pol.late && e.Deadline > 0 && need > e.Remaining() {
		// Say so once: even on on-demand capacity the work left takes
		// longer than the time left (the policy still does its best).
		es.pol.late = true
		msg := fmt.Sprintf("the deadline cannot be met even on on-demand capacity: about %s of work left at %d at a time, earliest finish about %s (deadline %s)",
			need.Round(time.Minute), e.Lanes, now.Add(need).UTC().Format(time.RFC3339), es.exp.CreatedAt.Add(e.Deadline).UTC().Format(time.RFC3339))
		it.event(&virga.Event{ExperimentID: es.exp.ID, Kind: virga.EventExperimentLate, Message: msg, Time: now})
		c.log.Warn(msg, "experiment", es.exp.ID)
	}
	e.Committed = e.Committed || e.MustOnDemand()
	es.pol.committed = e.Committed
	moves := schedule.Feasible(e, c.cfg.Policy.Place(e, nil))
	// 3. Carry out the moves.
	n := running(es)
	started := false
	pending := 0.0 // expected cost of the trials started in this pass
	for _, m := range moves {
		ts, tr := v.trials[m.Trial-1], &e.Trials[m.Trial-1]
		if !tr.Waiting() {
			c.move(it, es, ts, e, tr, m.Pool, now)
			continue
		}
		if n >= es.spec.MaxConcurrent {
			continue
		}
		p := &pools[m.Pool]
		if !p.Up || !res.Fits(p.Free) {
			continue
		}
		ts.pool = p.Name
		if ok, why := c.budgetFits(es, ts, res, now, &pending); !ok {
			ts.pool = ""
			if n == 0 {
				c.stopForBudget(it, es, why, now)
			}
			break
		}
		p.Free = p.Free.Sub(res)
		if c.inflightPool == nil {
			c.inflightPool = map[string]virga.Resources{}
		}
		c.inflightPool[p.Name] = c.inflightPool[p.Name].Add(res)
		*free = free.Sub(res)
		c.inflight = c.inflight.Add(res)
		it.toStart = append(it.toStart, ts)
		n++
		started = true
	}
	if !started {
		c.maybeFinish(it, es)
	}
	return true
}

// move stops a running trial the policy moves to pool to (-1: to wait),
// saying why; once stopped it waits, queued, and the policy places it again.
func (c *Controller) move(it *iteration, es *expState, ts *trialState, e *schedule.Experiment, tr *schedule.Trial, to int, now time.Time) {
	from := &e.Pools[tr.Pool]
	market := func(p *schedule.Pool) string {
		if p.Spot {
			return "spot"
		}
		return "on-demand"
	}
	var msg string
	switch {
	case to < 0:
		msg = fmt.Sprintf("moving off %s pool %s to wait for cheaper capacity: the deadline allows it (%s of work left, %s to the deadline)",
			market(from), from.Name, e.LaneLeft().Round(time.Second), e.Remaining().Round(time.Second))
	case from.Reclaiming:
		msg = fmt.Sprintf("moving to %s pool %s: pool %s is reclaiming its capacity", market(&e.Pools[to]), e.Pools[to].Name, from.Name)
	case !e.Pools[to].Spot:
		msg = fmt.Sprintf("moving to on-demand pool %s: the deadline needs it (%s of work left, %s to the deadline)",
			e.Pools[to].Name, e.LaneLeft().Round(time.Second), e.Remaining().Round(time.Second))
	default:
		msg = fmt.Sprintf("moving to spot pool %s: the deadline allows it, at $%.4g an hour instead of $%.4g",
			e.Pools[to].Name, e.Pools[to].Price, from.Price)
	}
	ts.moveTo = ""
	if to >= 0 {
		ts.moveTo = e.Pools[to].Name
	}
	t := ts.t
	if !c.setTrial(it, ts, virga.TrialRunning, virga.ReasonMoving, msg, now) {
		return
	}
	it.event(&virga.Event{ExperimentID: es.exp.ID, TrialID: t.ID, AttemptID: ts.attempt.ID, Kind: virga.EventTrialMoving, Message: msg, Time: now})
	c.stopAttempt(it, ts, stopMove)
}

// afterMove settles a trial whose attempt a ended after the policy moved it
// while its experiment is active: it waits, queued, to resume from its
// latest checkpoint where the policy places it, without counting a restart.
func (c *Controller) afterMove(it *iteration, ts *trialState, a *virga.Attempt, now time.Time) {
	t := ts.t
	msg := "moved off pool " + a.Pool + "; resuming from " + ckptName(t.Checkpoint)
	c.setTrial(it, ts, virga.TrialQueued, virga.ReasonMoved, msg, now)
	it.event(&virga.Event{ExperimentID: ts.exp.exp.ID, TrialID: t.ID, AttemptID: a.ID, Kind: virga.EventTrialMoved, Message: msg, Time: now})
}
