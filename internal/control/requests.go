package control

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

type submitReq struct {
	file     string
	data     []byte
	estimate []byte // recorded with the experiment as an "experiment.estimate" event
	spec     *spec.Experiment
	reply    chan result[*virga.Experiment]
}

// Submit validates an experiment file and, if it is valid, commits a new
// experiment and starts it. A file with problems returns a *spec.Error and
// writes nothing.
func (c *Controller) Submit(ctx context.Context, file string, data []byte) (*virga.Experiment, error) {
	return c.SubmitWithEstimate(ctx, file, data, nil)
}

// MaxEstimate bounds the estimate recorded with an experiment.
const MaxEstimate = 64 << 10

// SubmitWithEstimate is Submit that also records estimate, the forecast of
// the run made before it (opaque JSON, e.g. virga estimate's), as the
// experiment's "experiment.estimate" event, so that what happened can be
// shown beside it.
func (c *Controller) SubmitWithEstimate(ctx context.Context, file string, data, estimate []byte) (*virga.Experiment, error) {
	if len(estimate) > MaxEstimate || (len(estimate) > 0 && !json.Valid(estimate)) {
		return nil, fmt.Errorf("the estimate must be JSON of at most %d bytes", MaxEstimate)
	}
	e, err := spec.Parse(file, data)
	if err != nil {
		return nil, err
	}
	return c.submit(ctx, file, data, estimate, e)
}

// SubmitSpec is SubmitWithEstimate of an experiment the caller parsed from
// data and may have changed since (a simulation overriding its deadline,
// budget or seed); e must be valid, as spec.Parse returns it.
func (c *Controller) SubmitSpec(ctx context.Context, file string, data, estimate []byte, e *spec.Experiment) (*virga.Experiment, error) {
	if len(estimate) > MaxEstimate || (len(estimate) > 0 && !json.Valid(estimate)) {
		return nil, fmt.Errorf("the estimate must be JSON of at most %d bytes", MaxEstimate)
	}
	return c.submit(ctx, file, data, estimate, e)
}

func (c *Controller) submit(ctx context.Context, file string, data, estimate []byte, e *spec.Experiment) (*virga.Experiment, error) {
	if now := c.now(); !e.Deadline.IsZero() && !e.Deadline.Time(now).After(now) {
		return nil, &spec.Error{Problems: []spec.Problem{{File: file, Line: e.Deadline.Line, Col: e.Deadline.Col, Path: "deadline",
			Msg: fmt.Sprintf("%s has passed (it is %s); give a later time or a duration from submission like 36h",
				e.Deadline.At.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))}}}
	}
	r := &submitReq{file: file, data: data, estimate: estimate, spec: e, reply: make(chan result[*virga.Experiment], 1)}
	return call(ctx, c, r, r.reply)
}

func (c *Controller) handleSubmit(it *iteration, r *submitReq) {
	seed := r.spec.Seed
	if seed == 0 {
		seed = c.cfg.Rand.Uint64()
	}
	s, err := c.cfg.NewSearcher(r.spec, seed)
	if err != nil {
		r.reply <- result[*virga.Experiment]{err: fmt.Errorf("%s: searcher: %w", r.file, err)}
		return
	}
	snap, err := s.Snapshot()
	if err != nil {
		r.reply <- result[*virga.Experiment]{err: fmtErr("snapshot of new searcher", err)}
		return
	}
	now := c.now()
	exp := &virga.Experiment{Name: r.spec.Name, Spec: r.data, SpecFile: r.file, SearcherState: snap, CreatedAt: now, UpdatedAt: now}
	if err := exp.Transition(virga.ExperimentActive, virga.ReasonNone, "", now); err != nil {
		r.reply <- result[*virga.Experiment]{err: err}
		return
	}
	es := &expState{exp: exp, spec: r.spec, searcher: s}
	es.pol.hint = hintOf(r.estimate)
	it.b.Experiments = append(it.b.Experiments, exp)
	// Its creation and the estimate submitted with it are written with it,
	// in the same transaction: once the submission is answered, a crash
	// loses neither.
	it.b.NewExperimentEvents = append(it.b.NewExperimentEvents, store.NewExperimentEvent{Experiment: exp,
		Event: &virga.Event{Kind: virga.EventExperimentCreated, Message: fmt.Sprintf("%s (seed %d)", r.file, seed), Time: now}})
	if len(r.estimate) > 0 {
		it.b.NewExperimentEvents = append(it.b.NewExperimentEvents, store.NewExperimentEvent{Experiment: exp,
			Event: &virga.Event{Kind: virga.EventExperimentEstimate, Message: string(r.estimate), Time: now}})
	}
	it.after = append(it.after, func() {
		c.exps[exp.ID] = es
		e := *exp
		r.reply <- result[*virga.Experiment]{v: &e}
	})
	// Schedule its first trials in the next pass, now that it is known.
	it.again = true
}

type reportReq struct {
	attemptID int64
	rep       wire.Report
	ckpt      *checkpoint.Info
	time      time.Time
	reply     chan result[search.Decision]
}

// AttemptTrial returns the trial of a live attempt, for authorising reports.
func (c *Controller) AttemptTrial(attemptID int64) (trialID int64, ok bool) {
	la := c.liveAttempt(attemptID)
	if la == nil {
		return 0, false
	}
	return la.trialID, true
}

// Report records a metric report of a live attempt: it saves the trial's
// checkpoint directory if it changed, commits the metric (and checkpoint)
// durably, and returns the searcher's decision. ErrSuperseded means the
// attempt is no longer current; virga.ErrNotFound that it never existed.
func (c *Controller) Report(ctx context.Context, attemptID int64, rep wire.Report) (search.Decision, error) {
	if err := rep.Validate(); err != nil {
		return search.Continue, err
	}
	la := c.liveAttempt(attemptID)
	if la == nil {
		return search.Stop, c.notLive(ctx, attemptID)
	}
	if !Allowed(ctx, la.trialID) {
		return search.Continue, ErrForbidden
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	r := &reportReq{attemptID: attemptID, rep: rep, time: c.now(), reply: make(chan result[search.Decision], 1)}
	var newFP string
	if rep.Checkpoint != "" {
		if rep.Checkpoint != la.lastID {
			info, ok := la.uploaded[rep.Checkpoint]
			if !ok {
				return search.Continue, fmt.Errorf("%w: %s was not uploaded by attempt %d; upload it first", ErrCheckpointNotUploaded, rep.Checkpoint, attemptID)
			}
			r.ckpt = &info
		}
	} else if la.ckptDir != "" {
		fp, err := checkpoint.Fingerprint(la.ckptDir)
		if err != nil {
			return search.Continue, fmtErr("reading checkpoint directory", err)
		}
		if fp != la.lastFP {
			info, err := c.cfg.Checkpoints.SaveFor("trial-"+strconv.FormatInt(la.trialID, 10), la.ckptDir)
			if err != nil {
				return search.Continue, err
			}
			if info.ID != "" && info.ID != la.lastID {
				r.ckpt = &info
			}
			newFP = fp
		}
	}
	d, err := call(ctx, c, r, r.reply)
	if err == nil {
		c.met.reported(r.ckpt != nil)
	}
	if err == nil && newFP != "" {
		la.lastFP = newFP
	}
	if err == nil && r.ckpt != nil {
		la.lastID = r.ckpt.ID
	}
	if err == nil && rep.Checkpoint != "" {
		// Named by an acknowledged report: no longer unreported, whether it
		// was new or the latest uploaded again.
		delete(la.uploaded, rep.Checkpoint)
	}
	return d, err
}

func (c *Controller) handleReport(it *iteration, r *reportReq) {
	ts := c.attempts[r.attemptID]
	if ts == nil || ts.attempt == nil || ts.attempt.ID != r.attemptID {
		r.reply <- result[search.Decision]{v: search.Stop, err: ErrSuperseded}
		return
	}
	ts.seenAlive(r.time)
	t, es := ts.t, ts.exp
	// Deletions run on this goroutine, so a checkpoint that exists now stays
	// until it is recorded (the latest is never dropped).
	if r.ckpt != nil && !c.cfg.Checkpoints.Exists(r.ckpt.ID) {
		r.reply <- result[search.Decision]{err: ErrCheckpointGone}
		return
	}
	it.b.Metrics = append(it.b.Metrics, virga.Metric{TrialID: t.ID, AttemptID: r.attemptID, Step: r.rep.Step, Values: r.rep.Metrics, Time: r.time})
	t.Step = r.rep.Step
	if r.ckpt != nil {
		ck := virga.Checkpoint{ID: r.ckpt.ID, TrialID: t.ID, AttemptID: r.attemptID, Step: r.rep.Step, Size: r.ckpt.Size, Files: r.ckpt.Files, Time: r.time}
		it.b.Checkpoints = append(it.b.Checkpoints, ck)
		inherited := t.Checkpoint != "" && t.Checkpoint == t.ParentCheckpoint && t.Checkpoint != ck.ID
		prev := t.Checkpoint
		c.setCheckpoint(ts, ck.ID)
		c.keepCheckpoint(ts, ck)
		c.retain(it, ts)
		// A trial that started from its parent's checkpoint has one of its
		// own now: the parent's files go once no trial needs them (the
		// parent's retention kept them only while this trial did).
		// Only while the parent is live is it known whether it still holds
		// them; a parent that ended keeps them as its own.
		if inherited && c.trials[t.Parent] != nil && !c.checkpointShared(ts, prev) {
			it.after = append(it.after, func() {
				if err := c.cfg.Checkpoints.Delete(prev); err != nil {
					c.log.Warn("deleting an inherited checkpoint", "id", prev, "err", err)
				}
			})
		}
		it.touchTrial(ts) // the checkpoint a restart needs is written at once
	}
	ts.speed.first = c.progressFrom(ts)
	ts.speed.report(ts.exp, ts.attempt.ID, r.rep.Step, r.time, r.ckpt != nil)
	c.progress[ts] = true
	it.reported[ts] = true
	d := search.Continue
	if v, ok := r.rep.Metrics[es.spec.Objective.Metric]; ok {
		v := v
		t.Latest = &v
		if t.Best == nil || es.spec.Objective.Better(v, *t.Best) {
			b := v
			t.Best, t.BestStep = &b, r.rep.Step
		}
		// A trial already being stopped or paused is not judged again: the
		// searcher would decide for a trial that control ends anyway. One
		// being moved goes on elsewhere: it is judged.
		if ts.stopping == notStopping || ts.stopping == stopMove {
			d = es.searcher.Observe(t.ID, r.rep.Step, v)
			es.dirty = true
		}
		if pr, ok := es.searcher.(search.Predictor); ok {
			if p := pr.Prediction(t.ID); p != nil && (t.Prediction == nil || *p != *t.Prediction) {
				t.Prediction = p
			}
		}
	}
	if ts.stopping != notStopping && (ts.stopping != stopMove || d == search.Continue) {
		d = search.Stop
	} else if d != search.Continue {
		// The decision is written with the trial (and with the searcher's
		// snapshot that made it), so that a restarted server still knows
		// why the process is exiting.
		ts.stopping = stopEarly
		why, msg := virga.ReasonStoppingEarly, stoppingBySearcher
		if d == search.Pause {
			ts.stopping = stopSearchPause
			why, msg = virga.ReasonPausingBySearcher, pausingBySearcher
		}
		c.setTrial(it, ts, virga.TrialRunning, why, msg, r.time)
		a := ts.attempt
		grace := es.spec.StopGrace.D()
		it.event(&virga.Event{ExperimentID: es.exp.ID, TrialID: t.ID, AttemptID: a.ID, Kind: virga.EventTrialDecision,
			Message: fmt.Sprintf("%s at step %d", d, r.rep.Step), Time: r.time})
		if a.Backend != apiBackend {
			it.after = append(it.after, func() { _ = c.cfg.Backend.Stop(a.ID, grace) })
		}
		// A searcher pause is resumed by the searcher, not by the user.
		if d == search.Pause {
			d = search.Stop
		}
	}
	it.after = append(it.after, func() { r.reply <- result[search.Decision]{v: d} })
}

// retain keeps a trial's newest keep_last checkpoints and the one of its best
// step, and drops the others, oldest first.
func (c *Controller) retain(it *iteration, ts *trialState) {
	keep := max(ts.exp.spec.Checkpoints.KeepLast, 1)
	excess := len(ts.ckpts) - keep
	var kept, dropped []virga.Checkpoint
	for i, ck := range ts.ckpts {
		newest := i >= len(ts.ckpts)-keep
		best := ts.t.Best != nil && ck.Step == ts.t.BestStep
		if excess <= 0 || newest || best || ck.ID == ts.t.Checkpoint {
			kept = append(kept, ck)
			continue
		}
		excess--
		dropped = append(dropped, ck)
	}
	ts.ckpts = kept
	for _, ck := range dropped {
		c.dropCheckpoint(ts, ck.ID)
		it.b.DeleteCheckpoints = append(it.b.DeleteCheckpoints, storeRef(ck))
		if c.checkpointShared(ts, ck.ID) {
			continue
		}
		id := ck.ID
		it.after = append(it.after, func() {
			if err := c.cfg.Checkpoints.Delete(id); err != nil {
				c.log.Warn("deleting old checkpoint", "id", id, "err", err)
			}
		})
	}
}

type opReq struct {
	id    int64
	op    wire.Op
	reply chan result[*virga.Experiment]
}

// Control applies a user action to an experiment and returns its new state.
// Acting on a terminal experiment returns an error wrapping virga.ErrConflict.
func (c *Controller) Control(ctx context.Context, experimentID int64, op wire.Op) (*virga.Experiment, error) {
	switch op {
	case wire.OpStop, wire.OpPause, wire.OpResume:
	default:
		return nil, fmt.Errorf("unknown operation %q (want stop, pause or resume)", op)
	}
	r := &opReq{id: experimentID, op: op, reply: make(chan result[*virga.Experiment], 1)}
	return call(ctx, c, r, r.reply)
}

func (c *Controller) handleOp(it *iteration, r *opReq) {
	es := c.exps[r.id]
	if es == nil {
		exp, err := c.cfg.Store.Experiment(context.Background(), r.id)
		if err != nil {
			r.reply <- result[*virga.Experiment]{err: err}
			return
		}
		r.reply <- result[*virga.Experiment]{err: fmt.Errorf("experiment %d is %s: %w", r.id, exp.State, virga.ErrConflict)}
		return
	}
	now := c.now()
	prev := es.exp.State
	var kind virga.EventKind
	switch r.op {
	case wire.OpStop:
		kind = virga.EventExperimentStop
		if !c.setExp(it, es, virga.ExperimentStopping, virga.ReasonStoppedByUser, "stopping at user request", now) {
			r.reply <- result[*virga.Experiment]{err: fmt.Errorf("experiment %d is %s: %w", r.id, prev, virga.ErrConflict)}
			return
		}
		for _, ts := range es.trials {
			switch {
			case ts.attempt != nil:
				c.stopAttempt(it, ts, stopUser)
			case !ts.t.State.Terminal():
				c.endTrial(it, ts, virga.TrialStopped, virga.ReasonStoppedByUser, "stopped by user", search.Stopped, now)
			}
		}
	case wire.OpPause:
		kind = virga.EventExperimentPause
		if prev != virga.ExperimentActive {
			r.reply <- result[*virga.Experiment]{err: fmt.Errorf("experiment %d is %s, not ACTIVE: %w", r.id, prev, virga.ErrConflict)}
			return
		}
		c.setExp(it, es, virga.ExperimentPaused, virga.ReasonPausedByUser, "paused by user", now)
		for _, ts := range es.trials {
			if ts.attempt != nil {
				c.stopAttempt(it, ts, stopPause)
			}
		}
	case wire.OpResume:
		kind = virga.EventExperimentResume
		if prev != virga.ExperimentPaused {
			r.reply <- result[*virga.Experiment]{err: fmt.Errorf("experiment %d is %s, not PAUSED: %w", r.id, prev, virga.ErrConflict)}
			return
		}
		c.setExp(it, es, virga.ExperimentActive, virga.ReasonNone, "", now)
		for _, ts := range es.trials {
			if ts.t.State == virga.TrialPaused && ts.t.Reason == virga.ReasonPausedByUser {
				c.setTrial(it, ts, virga.TrialQueued, virga.ReasonResumedByUser, "resumed by user", now)
			}
		}
	}
	it.event(&virga.Event{ExperimentID: es.exp.ID, Kind: kind, Message: "user request", Time: now})
	c.maybeFinish(it, es)
	it.after = append(it.after, func() {
		e := *es.exp
		r.reply <- result[*virga.Experiment]{v: &e}
	})
}

// stopAttempt asks the backend to stop a trial's live attempt for a reason.
func (c *Controller) stopAttempt(it *iteration, ts *trialState, why stopReason) {
	if ts.stopping == notStopping || why == stopUser {
		ts.stopping = why
	}
	a := ts.attempt
	if a.Backend == apiBackend {
		code := 0
		c.handleExit(it, eventExit(a.ID, c.now(), &code), false)
		return
	}
	grace := ts.exp.spec.StopGrace.D()
	it.after = append(it.after, func() { _ = c.cfg.Backend.Stop(a.ID, grace) })
}
