package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

type askReq struct {
	id    int64
	reply chan result[wire.Asked]
}

// Ask creates a trial of an API-driven experiment (one without an entrypoint)
// from the searcher's next proposal. It returns an error wrapping
// search.ErrExhausted when the search has no more trials to give now.
func (c *Controller) Ask(ctx context.Context, experimentID int64) (wire.Asked, error) {
	r := &askReq{id: experimentID, reply: make(chan result[wire.Asked], 1)}
	return call(ctx, c, r, r.reply)
}

func (c *Controller) handleAsk(it *iteration, r *askReq) {
	es := c.exps[r.id]
	switch {
	case es == nil:
		if _, err := c.cfg.Store.Experiment(context.Background(), r.id); err != nil {
			r.reply <- result[wire.Asked]{err: err}
			return
		}
		r.reply <- result[wire.Asked]{err: fmt.Errorf("experiment %d has ended: %w", r.id, virga.ErrConflict)}
		return
	case !es.spec.DriveByAPI():
		r.reply <- result[wire.Asked]{err: fmt.Errorf("experiment %d runs its own trials (it has an entrypoint): %w", r.id, virga.ErrConflict)}
		return
	case es.exp.State != virga.ExperimentActive:
		r.reply <- result[wire.Asked]{err: fmt.Errorf("experiment %d is %s: %w", r.id, es.exp.State, virga.ErrConflict)}
		return
	}
	// A trial whose attempt failed (Tell ok=false) runs again before any new one.
	var ts *trialState
	for _, q := range es.trials {
		if _, taken := it.asks[q]; !taken && q.t.State == virga.TrialQueued && q.attempt == nil {
			ts = q
			break
		}
	}
	if ts == nil {
		ts = c.propose(it, es, 1)
	}
	if ts == nil {
		c.maybeFinish(it, es)
		r.reply <- result[wire.Asked]{err: fmt.Errorf("experiment %d: %w", r.id, search.ErrExhausted)}
		return
	}
	it.toStart = append(it.toStart, ts)
	it.asks[ts] = r.reply
}

type tellReq struct {
	attemptID int64
	ok        bool
	ctx       context.Context // carries the caller's trial restriction
	reply     chan result[*virga.Trial]
}

// Tell ends an API-driven trial's attempt: ok means it completed, otherwise it
// failed (and is retried up to max_restarts, as a process would be).
func (c *Controller) Tell(ctx context.Context, attemptID int64, ok bool) (*virga.Trial, error) {
	r := &tellReq{attemptID: attemptID, ok: ok, ctx: ctx, reply: make(chan result[*virga.Trial], 1)}
	t, err := call(ctx, c, r, r.reply)
	if errors.Is(err, ErrSuperseded) {
		err = c.notLive(ctx, attemptID)
	}
	return t, err
}

func (c *Controller) handleTell(it *iteration, r *tellReq) {
	ts := c.attempts[r.attemptID]
	if ts == nil || ts.attempt == nil || ts.attempt.Backend != apiBackend {
		r.reply <- result[*virga.Trial]{err: ErrSuperseded}
		return
	}
	if !Allowed(r.ctx, ts.t.ID) {
		r.reply <- result[*virga.Trial]{err: ErrForbidden}
		return
	}
	code := 0
	if !r.ok {
		code = 1
	}
	c.handleExit(it, eventExit(r.attemptID, c.now(), &code), false)
	it.after = append(it.after, func() { r.reply <- result[*virga.Trial]{v: cloneTrial(ts.t)} })
}

func eventExit(attemptID int64, now time.Time, code *int) backend.Event {
	return backend.Event{AttemptID: attemptID, Kind: backend.Exited, Time: now, ExitCode: code}
}

// recomputeProgress sets a trial's step, latest and best objective from its
// metrics and reports whether anything changed.
func recomputeProgress(t *virga.Trial, ms []virga.Metric, o spec.Objective) bool {
	if len(ms) == 0 {
		return false
	}
	type progress struct {
		step, bestStep int64
		latest, best   float64
		hasLatest      bool
		hasBest        bool
	}
	of := func(t *virga.Trial) progress {
		p := progress{step: t.Step, bestStep: t.BestStep}
		if t.Latest != nil {
			p.latest, p.hasLatest = *t.Latest, true
		}
		if t.Best != nil {
			p.best, p.hasBest = *t.Best, true
		}
		return p
	}
	before := of(t)
	last := ms[0]
	var best *float64
	var bestStep int64
	for _, m := range ms {
		if m.Time.After(last.Time) || (m.Time.Equal(last.Time) && m.Step > last.Step) {
			last = m
		}
		if v, ok := m.Values[o.Metric]; ok && (best == nil || o.Better(v, *best)) {
			b := v
			best, bestStep = &b, m.Step
		}
	}
	t.Step = last.Step
	if v, ok := last.Values[o.Metric]; ok {
		t.Latest = &v
	}
	t.Best, t.BestStep = best, bestStep
	return of(t) != before
}

func storeRef(ck virga.Checkpoint) store.CheckpointRef {
	return store.CheckpointRef{TrialID: ck.TrialID, ID: ck.ID}
}

// recover rebuilds the loop's memory from the store: live experiments with
// their searchers restored, their trials, and every attempt that was live when
// the last server stopped, which the backend adopts (or reports lost).
func (c *Controller) recover(ctx context.Context) (*iteration, error) {
	it := newIteration()
	// Checkpoint transfers cut short by a crash: nothing refers to them.
	if err := os.RemoveAll(filepath.Join(c.cfg.DataDir, "transfers")); err != nil {
		return nil, fmtErr("removing unfinished checkpoint transfers", err)
	}
	exps, err := c.cfg.Store.Experiments(ctx, store.ExperimentFilter{States: []virga.ExperimentState{
		virga.ExperimentActive, virga.ExperimentPaused, virga.ExperimentStopping}})
	if err != nil {
		return nil, fmtErr("listing live experiments", err)
	}
	now := c.now()
	// reported is each attempt's latest report (metric or checkpoint): the
	// last moment a live attempt was known to run, should it be lost.
	reported := map[int64]time.Time{}
	for i := len(exps) - 1; i >= 0; i-- { // oldest first
		exp := exps[i]
		es := &expState{exp: exp}
		es.spec, err = spec.Parse(exp.SpecFile, exp.Spec)
		if err == nil {
			es.searcher, err = c.cfg.NewSearcher(es.spec, 1)
		}
		if err == nil {
			err = es.searcher.Restore(exp.SearcherState)
		}
		if err != nil {
			// The spec was valid when submitted; a newer Virga may disagree.
			if terr := exp.Transition(virga.ExperimentFailed, virga.ReasonUnrecoverable, "cannot be recovered: "+err.Error(), now); terr != nil {
				return nil, terr // the listing holds only live experiments
			}
			it.b.Experiments = append(it.b.Experiments, exp)
			continue
		}
		c.exps[exp.ID] = es
		if err := c.recoverSpend(ctx, es); err != nil {
			return nil, err
		}
		if c.usePolicy(es) {
			if es.pol.hint, err = c.recoverHint(ctx, exp.ID); err != nil {
				return nil, err
			}
		}
		trials, err := c.cfg.Store.Trials(ctx, exp.ID)
		if err != nil {
			return nil, fmtErr("listing trials", err)
		}
		for _, t := range trials {
			ts := &trialState{t: t, exp: es}
			es.addTrial(ts)
			if t.State.Terminal() {
				// The searcher was told it ended; the experiment policy
				// still learns the step time from it.
				if c.cfg.Policy != nil && !es.spec.Deadline.IsZero() {
					ms, err := c.cfg.Store.Metrics(ctx, store.MetricFilter{TrialID: t.ID, AfterStep: -1})
					if err != nil {
						return nil, fmtErr("listing metrics", err)
					}
					ts.speed.recover(es, ms, nil)
				}
				continue
			}
			es.searcher.Created(t.Request, t.ID)
			if ts.ckpts, err = c.cfg.Store.Checkpoints(ctx, t.ID); err != nil {
				return nil, fmtErr("listing checkpoints", err)
			}
			c.track(ts)
			// The row's progress may lag its metrics (it is written at most every
			// progressInterval): recompute it.
			ms, err := c.cfg.Store.Metrics(ctx, store.MetricFilter{TrialID: t.ID, AfterStep: -1})
			if err != nil {
				return nil, fmtErr("listing metrics", err)
			}
			for _, m := range ms {
				if m.Time.After(reported[m.AttemptID]) {
					reported[m.AttemptID] = m.Time
				}
			}
			for _, ck := range ts.ckpts {
				if ck.Time.After(reported[ck.AttemptID]) {
					reported[ck.AttemptID] = ck.Time
				}
			}
			if recomputeProgress(t, ms, es.spec.Objective) {
				it.touchTrial(ts)
			}
			ts.speed.recover(es, ms, ts.ckpts)
		}
		es.dirty = true
		it.touchExp(es)
	}
	live, err := c.cfg.Store.LiveAttempts(ctx)
	if err != nil {
		return nil, fmtErr("listing live attempts", err)
	}
	adopter, canAdopt := c.cfg.Backend.(backend.Adopter)
	for _, a := range live {
		if a.Dir == "" && a.Backend != apiBackend {
			a.Dir = c.AttemptDir(a.ID) // committed before its directory was recorded
		}
		ts := c.trials[a.TrialID]
		if ts == nil {
			// Its experiment ended (or could not be recovered): settle the record.
			a.State, a.Outcome, a.EndedAt, a.Message = virga.AttemptExited, virga.OutcomeLost, now, "found live after its trial ended"
			it.b.Attempts = append(it.b.Attempts, a)
			if canAdopt && a.Backend == c.cfg.Backend.Name() {
				_ = adopter.Adopt(ctx, a, virga.Resources{})
				_ = c.cfg.Backend.Stop(a.ID, 0)
			}
			continue
		}
		ts.attempt = a
		ts.started = a.CreatedAt
		ts.alive = a.StartedAt
		ts.seenAlive(reported[a.ID])
		c.attempts[a.ID] = ts
		la := &liveAttempt{attemptID: a.ID, trialID: a.TrialID, experimentID: ts.exp.exp.ID,
			ckptDir: c.TrialDir(a.TrialID), lastID: ts.t.Checkpoint, restore: a.Restored}
		if a.Backend == apiBackend || c.remote {
			la.ckptDir = ""
		}
		c.setLive(la)
		c.startedSeen[a.ID] = true
		ts.stopping = recoveredStop(ts)
		if a.Backend == apiBackend {
			continue
		}
		if a.Backend != c.cfg.Backend.Name() || !canAdopt {
			c.pendingInputs = append(c.pendingInputs, startFailed{attemptID: a.ID, lost: true,
				err: fmt.Errorf("backend %q cannot adopt attempts of backend %q", c.cfg.Backend.Name(), a.Backend)})
			continue
		}
		if err := adopter.Adopt(ctx, a, resources(ts.exp.spec)); err != nil {
			c.log.Error("cannot adopt attempt; counting it lost", "attempt", a.ID, "trial", a.TrialID, "err", err)
			c.pendingInputs = append(c.pendingInputs, startFailed{attemptID: a.ID, lost: true, err: fmt.Errorf("adopting: %w", err)})
			continue
		}
		if ts.stopping != notStopping {
			_ = c.cfg.Backend.Stop(a.ID, ts.exp.spec.StopGrace.D())
		}
		it.event(&virga.Event{ExperimentID: ts.exp.exp.ID, TrialID: a.TrialID, AttemptID: a.ID, Kind: virga.EventAttemptAdopted, Time: now})
	}
	// Every live attempt is the backend's now: what it finds of any other
	// (a job submitted as the last server died, for an attempt settled
	// since) is an orphan, for it to end.
	if r, ok := c.cfg.Backend.(backend.Reaper); ok {
		r.AdoptedAll()
	}
	// Trials marked running whose attempt never got committed wait again.
	for _, ts := range c.trials {
		if ts.t.State == virga.TrialRunning && ts.attempt == nil {
			c.setTrial(it, ts, virga.TrialQueued, virga.ReasonRequeued, "requeued after a server restart", now)
		}
	}
	return it, nil
}

// recoverHint reads what the estimate submitted with an experiment says of
// its trials (its experiment.estimate event), after a restart of the server.
func (c *Controller) recoverHint(ctx context.Context, id int64) (estimateHint, error) {
	evs, err := c.cfg.Store.Events(ctx, store.EventFilter{ExperimentID: id, Limit: 4})
	if err != nil {
		return estimateHint{}, fmtErr("listing events", err)
	}
	for _, ev := range evs {
		if ev.Kind == virga.EventExperimentEstimate {
			return hintOf([]byte(ev.Message)), nil
		}
	}
	return estimateHint{}, nil
}
