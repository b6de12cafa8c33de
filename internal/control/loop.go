package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// input is anything the loop handles: a request, a backend event or a tick.
type input interface{}

type eventInput struct{ ev backend.Event }

type tickInput struct{}

// stepReq is a Step: a tick whose caller waits until its pass has been
// committed and acted on.
type stepReq struct {
	reply  chan result[struct{}]
	events []backend.Event // handled first, in order (StepEvents)
}

// startFailed says an attempt could not be started (or adopted). lost marks
// failures that are not the trial's (recovery could not adopt it); the others
// count as a failed attempt, so a start that fails every time ends the trial
// after max_restarts instead of looping.
type startFailed struct {
	attemptID int64
	err       error
	lost      bool
}

// iteration collects the changes of one pass of the loop and what to do once
// they are committed.
type iteration struct {
	exps     map[*expState]bool
	reported map[*trialState]bool // trials whose progress changed (published; written per commit's rules)
	trials   []*trialState        // trials to write (inserted when ID is 0)
	tset     map[*trialState]bool
	b        store.Batch
	after    []func() // run after the commit, in order
	toStart  []*trialState
	asks     map[*trialState]chan result[wire.Asked]
	again    bool                    // run another pass at once (new experiments)
	tick     bool                    // check timeouts and budgets (a tick or a Step)
	steps    []chan result[struct{}] // Step calls answered once the pass is acted on
}

func newIteration() *iteration {
	return &iteration{exps: map[*expState]bool{}, reported: map[*trialState]bool{}, tset: map[*trialState]bool{}, asks: map[*trialState]chan result[wire.Asked]{}}
}

func (it *iteration) touchTrial(ts *trialState) {
	if !it.tset[ts] {
		it.tset[ts] = true
		it.trials = append(it.trials, ts)
	}
}

func (it *iteration) touchExp(es *expState) { it.exps[es] = true }

func (it *iteration) event(e *virga.Event) { it.b.Events = append(it.b.Events, e) }

// Run recovers the state from the store, then runs the loop until ctx ends or
// a commit fails. A failed commit ends Run with its error: the process should
// exit and a restart recovers from the store (crash-only).
func (c *Controller) Run(ctx context.Context) error {
	defer close(c.done)
	it, err := c.recover(ctx)
	if err == nil {
		err = c.iterate(ctx, it, nil)
	}
	if err != nil {
		c.err = err
		return err
	}
	// The ticker is armed before Ready: a test that advances a fake clock
	// once the loop is ready fires it.
	var ticks <-chan time.Time // nil: no ticker (Config.NoTicker)
	if !c.cfg.NoTicker {
		tick := c.cfg.Clock.NewTicker(c.cfg.TickInterval)
		defer tick.Stop()
		ticks = tick.C()
	}
	close(c.ready)
	events := c.cfg.Backend.Events()
	for {
		var ins []input
		select {
		case <-ctx.Done():
			// Write the progress not yet written; recovery would recompute it anyway.
			c.flushAll = true
			if err := c.iterate(context.WithoutCancel(ctx), newIteration(), nil); err != nil {
				c.log.Warn("writing trial progress at shutdown", "err", err)
			}
			return nil
		case in := <-c.inbox:
			ins = append(ins, in)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			ins = append(ins, eventInput{ev})
		case <-ticks:
			ins = append(ins, tickInput{})
		}
	drain:
		for len(ins) < c.cfg.MaxBatch {
			select {
			case in := <-c.inbox:
				ins = append(ins, in)
			case ev, ok := <-events:
				if !ok {
					events = nil
					break drain
				}
				ins = append(ins, eventInput{ev})
			default:
				break drain
			}
		}
		if err := c.iterate(ctx, newIteration(), ins); err != nil {
			if ctx.Err() != nil {
				// Stopped during the pass: nothing of it was acted on, as
				// if the server had stopped before it (recovery redoes it).
				return nil
			}
			c.err = err
			c.log.Error("control loop stopped", "err", err)
			return err
		}
	}
}

// Step makes the running loop (Run) take one pass at once and waits for it:
// the pass handles every request and backend event sent before the call
// (unless more than MaxBatch are waiting), checks timeouts and budgets as a
// tick does, decides, commits, and acts: when Step returns, the stops it
// decided have been sent to the backend and the attempts it started have
// returned from the backend's Start (a failed start is in the inbox, for the
// next pass). With a fake clock, tests advance the clock and Step instead of
// waiting for the ticker.
func (c *Controller) Step(ctx context.Context) error {
	return c.StepEvents(ctx, nil)
}

// StepEvents is Step with backend events handed to the pass directly, in
// order, rather than read from the backend's Events channel: a driver that
// runs a simulated backend in virtual time (internal/sim) decides which
// pass sees which event, so that a run is deterministic.
func (c *Controller) StepEvents(ctx context.Context, events []backend.Event) error {
	reply := make(chan result[struct{}], 1)
	_, err := call(ctx, c, stepReq{reply: reply, events: events}, reply)
	return err
}

// iterate runs one pass: handle inputs, schedule, commit, create attempts,
// commit, act. See the numbered steps.
func (c *Controller) iterate(ctx context.Context, it *iteration, ins []input) (err error) {
	defer c.met.timePass()()
	ins = append(c.pendingInputs, ins...)
	c.pendingInputs = nil
	// Steps are answered once every launch begun so far has returned.
	var steps []chan result[struct{}]
	defer func() {
		c.launching = slices.DeleteFunc(c.launching, func(done chan struct{}) bool {
			select {
			case <-done:
				return true
			default:
				return false
			}
		})
		if len(steps) == 0 {
			return
		}
		if len(c.launching) == 0 {
			// Nothing to wait for (most passes start nothing): answer
			// here rather than hand over to a goroutine.
			for _, s := range steps {
				s <- result[struct{}]{err: err}
			}
			return
		}
		launching := slices.Clone(c.launching)
		go func() {
			for _, done := range launching {
				<-done
			}
			for _, s := range steps {
				s <- result[struct{}]{err: err}
			}
		}()
	}()
	for {
		// 1. Handle every input, changing memory and collecting the batch.
		it.b.Events = append(it.b.Events, c.pendingEvents...)
		c.pendingEvents = nil
		for _, in := range ins {
			c.handle(it, in)
		}
		if it.tick {
			// After the pass's events: a timeout or budget is judged on
			// what is known now, not on the order the inputs came in.
			c.checkTimeouts(it)
			c.checkBudgets(it)
		}
		// 2. Decide which trials start and which new trials to create, and
		// add the attempts of the trials that start.
		c.schedule(it)
		launches := c.createAttempts(it, it.toStart)
		// 3. Commit; new trials and attempts get their IDs.
		if err := c.commit(ctx, it); err != nil {
			steps = append(steps, it.steps...)
			return err
		}
		for _, ts := range it.trials {
			if _, ok := c.trials[ts.t.ID]; !ok {
				c.track(ts)
				ts.exp.searcher.Created(ts.t.Request, ts.t.ID)
				ts.exp.dirty = true
			}
		}
		// 4. Act on what is now durable: replies, stops, deletions, launches.
		for _, f := range it.after {
			f()
		}
		for _, l := range launches {
			l.fill(c)
			c.attempts[l.la.attemptID] = l.ts
			c.setLive(l.la)
			if reply, ok := it.asks[l.ts]; ok {
				c.startedSeen[l.la.attemptID] = true // no process: nothing in flight
				reply <- result[wire.Asked]{v: wire.Asked{Trial: cloneTrial(l.ts.t), AttemptID: l.la.attemptID, Token: TrialToken(c.cfg.Secret, l.ts.t.ID)}}
				continue
			}
			done := make(chan struct{})
			c.launching = append(c.launching, done)
			go func() {
				defer close(done)
				c.launch(ctx, l)
			}()
		}
		steps = append(steps, it.steps...)
		if !it.again {
			return nil
		}
		it, ins = newIteration(), nil
	}
}

// commit writes the iteration's batch and publishes what changed.
func (c *Controller) commit(ctx context.Context, it *iteration) error {
	now := c.now()
	// 1. Progress of reporting trials (step, latest, best) is written at most
	// every progressInterval, or with any other change of the trial; it is
	// published at once, and recovery recomputes it from the metrics.
	for ts := range c.progress {
		if it.tset[ts] || c.flushAll || now.Sub(ts.written) >= progressInterval {
			it.touchTrial(ts)
		}
	}
	// 2. Searcher snapshots are written when they changed (on a volatile
	// store, only once the experiment ends or the loop stops: nothing
	// recovers from it).
	cands := map[*expState]bool{}
	for es := range it.exps {
		cands[es] = true
	}
	for _, ts := range it.trials {
		cands[ts.exp] = true
	}
	for ts := range it.reported {
		cands[ts.exp] = true
	}
	if c.flushAll {
		for _, es := range c.exps {
			cands[es] = true
		}
	}
	for es := range cands {
		if !es.dirty || c.cfg.Volatile && !c.flushAll && !es.exp.State.Terminal() {
			continue
		}
		snap, err := es.searcher.Snapshot()
		if err != nil {
			return fmtErr("snapshot of searcher", err)
		}
		es.dirty = false
		if !bytes.Equal(snap, es.exp.SearcherState) {
			es.exp.SearcherState = snap
			it.exps[es] = true
		}
	}
	for es := range it.exps {
		es.exp.UpdatedAt = now
		it.b.Experiments = append(it.b.Experiments, es.exp)
	}
	for _, ts := range it.trials {
		ts.t.UpdatedAt = now
		ts.written = now
		delete(c.progress, ts)
		it.b.Trials = append(it.b.Trials, ts.t)
	}
	if it.b.Empty() && len(it.reported) == 0 {
		return nil
	}
	newEvents := it.b.Events
	if !it.b.Empty() {
		if err := c.apply(ctx, &it.b); err != nil {
			return fmtErr("committing state", err)
		}
	}
	for _, e := range newEvents {
		if e.TrialID != 0 && e.ExperimentID == 0 {
			if ts := c.trials[e.TrialID]; ts != nil {
				e.ExperimentID = ts.exp.exp.ID
			}
		}
	}
	ups := map[int64]*wire.Update{}
	up := func(id int64) *wire.Update {
		u := ups[id]
		if u == nil {
			u = &wire.Update{ExperimentID: id}
			ups[id] = u
		}
		return u
	}
	for es := range it.exps {
		e := *es.exp
		up(es.exp.ID).Experiment = &e
	}
	for _, ts := range it.trials {
		u := up(ts.t.ExperimentID)
		u.Trials = append(u.Trials, cloneTrial(ts.t))
	}
	for ts := range it.reported {
		if !it.tset[ts] {
			u := up(ts.t.ExperimentID)
			u.Trials = append(u.Trials, cloneTrial(ts.t))
		}
	}
	c.publish(ups)
	return nil
}

func cloneTrial(t *virga.Trial) *virga.Trial {
	c := *t
	return &c
}

// handle applies one input to memory and the iteration's batch.
func (c *Controller) handle(it *iteration, in input) {
	switch in := in.(type) {
	case eventInput:
		c.handleEvent(it, in.ev)
	case dropUploads:
		c.dropUploads(it, in)
	case startFailed:
		noCapacity := errors.Is(in.err, virga.ErrNoCapacity)
		ev := backend.Event{AttemptID: in.attemptID, Kind: backend.Exited, Time: c.now(), Lost: in.lost || noCapacity,
			Message: "could not start: " + in.err.Error()}
		if ts := c.attempts[in.attemptID]; ts != nil && !noCapacity {
			ts.notBefore = ev.Time.Add(c.cfg.TickInterval) // do not retry in a hot loop
		}
		c.handleExit(it, ev, noCapacity)
	case tickInput:
		it.tick = true
	case stepReq:
		for _, ev := range in.events {
			c.handleEvent(it, ev)
		}
		it.tick = true
		it.steps = append(it.steps, in.reply)
	case *submitReq:
		c.handleSubmit(it, in)
	case *reportReq:
		c.handleReport(it, in)
	case *opReq:
		c.handleOp(it, in)
	case *askReq:
		c.handleAsk(it, in)
	case *tellReq:
		c.handleTell(it, in)
	case *statsReq:
		c.handleStats(it, in)
	default:
		c.log.Error("control: unknown input", "type", fmt.Sprintf("%T", in))
	}
}

func (c *Controller) handleEvent(it *iteration, ev backend.Event) {
	switch ev.Kind {
	case backend.Started:
		ts := c.attempts[ev.AttemptID]
		if ts == nil || ts.attempt == nil || ts.attempt.ID != ev.AttemptID {
			return
		}
		c.releaseInflight(ts)
		ts.seenAlive(ev.Time)
		a := ts.attempt
		if a.State == virga.AttemptStarting || a.PID != ev.PID || (a.Pool == "" && ev.Pool != "") {
			if a.Pool == "" {
				a.Pool = ev.Pool // an adopted attempt recorded without its pool
			}
			a.State = virga.AttemptRunning
			a.PID = ev.PID
			if a.StartedAt.IsZero() {
				a.StartedAt = ev.Time
			}
			it.b.Attempts = append(it.b.Attempts, a)
			it.event(&virga.Event{ExperimentID: ts.exp.exp.ID, TrialID: ts.t.ID, AttemptID: a.ID, Kind: virga.EventAttemptStarted,
				Message: "pid " + strconv.Itoa(ev.PID), Time: ev.Time})
		}
		if ts.stopping != notStopping {
			grace := ts.exp.spec.StopGrace.D()
			it.after = append(it.after, func() { _ = c.cfg.Backend.Stop(a.ID, grace) })
		}
	case backend.Exited:
		c.handleExit(it, ev, false)
	}
}

func (c *Controller) releaseInflight(ts *trialState) {
	if ts.attempt != nil && !c.startedSeen[ts.attempt.ID] {
		c.startedSeen[ts.attempt.ID] = true
		c.inflight = c.inflight.Sub(resources(ts.exp.spec))
		c.releasePool(ts.attempt.Pool, resources(ts.exp.spec))
	}
}

// handleExit ends the trial's current attempt and decides the trial's fate.
// noCapacity marks a start refused for lack of room: the trial waits again
// without counting a restart.
func (c *Controller) handleExit(it *iteration, ev backend.Event, noCapacity bool) {
	ts := c.attempts[ev.AttemptID]
	if ts == nil || ts.attempt == nil || ts.attempt.ID != ev.AttemptID {
		return
	}
	c.releaseInflight(ts)
	delete(c.startedSeen, ev.AttemptID)
	delete(c.attempts, ev.AttemptID)
	if la := c.liveAttempt(ev.AttemptID); la != nil && c.remote {
		go c.forgetUploads(la)
	}
	c.dropLive(ev.AttemptID)
	a, t, es := ts.attempt, ts.t, ts.exp
	ts.attempt = nil
	es.mayHaveSettled = true
	a.State = virga.AttemptExited
	a.EndedAt = ev.Time
	if ev.Lost {
		a.EndedAt = lostAt(a, ts.alive, ev)
	}
	a.ExitCode = ev.ExitCode
	a.Signal = ev.Signal
	a.Message = ev.Message
	if a.Pool == "" {
		a.Pool = ev.Pool
	}
	switch {
	case ev.Lost:
		a.Outcome = virga.OutcomeLost
	case ev.Preempted:
		a.Outcome = virga.OutcomePreempted
	case ts.stopping == stopTimeout:
		a.Outcome = virga.OutcomeTimeout
	case ts.stopping != notStopping:
		a.Outcome = virga.OutcomeStopped
	case ev.ExitCode != nil && *ev.ExitCode == 0:
		a.Outcome = virga.OutcomeSucceeded
	default:
		a.Outcome = virga.OutcomeFailed
	}
	c.settleCost(ts, a)
	it.b.Attempts = append(it.b.Attempts, a)
	it.event(&virga.Event{ExperimentID: es.exp.ID, TrialID: t.ID, AttemptID: a.ID, Kind: virga.EventAttemptExited,
		Message: describeExit(a), Time: ev.Time})
	it.touchTrial(ts)

	reason := ts.stopping
	ts.stopping = notStopping
	switch {
	case reason == stopPause && es.exp.State == virga.ExperimentActive:
		// Resumed before the paused attempt ended: go on from its checkpoint.
		c.setTrial(it, ts, virga.TrialQueued, virga.ReasonResumedByUser, "resumed by user", ev.Time)
	case reason == stopPause:
		c.setTrial(it, ts, virga.TrialPaused, virga.ReasonPausedByUser, pausedByUser, ev.Time)
	case reason == stopSearchPause:
		c.setTrial(it, ts, virga.TrialPaused, virga.ReasonPausedBySearcher, pausedBySearcher, ev.Time)
		if pa, ok := es.searcher.(search.PauseAware); ok {
			pa.Paused(t.ID) // from now on it may be promoted
			es.dirty = true
		}
	case reason == stopMove && es.exp.State != virga.ExperimentActive:
		c.afterStopWhileInactive(it, ts, ev.Time)
	case reason == stopMove:
		// Stopped to run elsewhere (or to wait): the policy places it again.
		c.afterMove(it, ts, a, ev.Time)
	case reason == stopEarly || reason == stopUser:
		why, msg := virga.ReasonStoppedEarly, "stopped early by the searcher"
		if reason == stopUser {
			why, msg = stoppedBy(es)
		}
		c.endTrial(it, ts, virga.TrialStopped, why, msg, search.Stopped, ev.Time)
	case a.Outcome == virga.OutcomeSucceeded:
		c.endTrial(it, ts, virga.TrialCompleted, virga.ReasonSucceeded, "", search.Completed, ev.Time)
	case noCapacity:
		// Wait for the next tick before trying again, not in a hot loop.
		c.setTrial(it, ts, virga.TrialQueued, virga.ReasonWaitingForCapacity, "waiting for capacity", ev.Time)
		ts.notBefore = ev.Time.Add(c.cfg.TickInterval)
	case (a.Outcome == virga.OutcomeLost || a.Outcome == virga.OutcomePreempted) && es.exp.State != virga.ExperimentActive:
		c.afterStopWhileInactive(it, ts, ev.Time)
	case a.Outcome == virga.OutcomePreempted:
		c.afterPreempted(it, ts, a, ev.Time)
	default:
		// A failure (or a lost process, or a timeout): restart from the latest
		// checkpoint while restarts remain. Lost attempts are not the trial's fault.
		if a.Outcome != virga.OutcomeLost {
			if t.Restarts >= es.spec.MaxRestarts {
				c.endTrial(it, ts, virga.TrialFailed, virga.ReasonRestartsExhausted,
					fmt.Sprintf("failed %d times; last: %s", t.Restarts+1, describeExit(a)), search.Failed, ev.Time)
				break
			}
			t.Restarts++
		}
		if es.exp.State == virga.ExperimentStopping {
			why, msg := stoppedBy(es)
			c.endTrial(it, ts, virga.TrialStopped, why, msg, search.Stopped, ev.Time)
			break
		}
		msg := "restarting from " + ckptName(t.Checkpoint) + " after " + describeExit(a)
		c.setTrial(it, ts, virga.TrialQueued, virga.ReasonRestarting, msg, ev.Time)
		it.event(&virga.Event{ExperimentID: es.exp.ID, TrialID: t.ID, Kind: virga.EventTrialRestarting, Message: msg, Time: ev.Time})
	}
	c.maybeFinish(it, es)
}

// afterStopWhileInactive settles a trial whose attempt was lost while its
// experiment was pausing or stopping.
func (c *Controller) afterStopWhileInactive(it *iteration, ts *trialState, now time.Time) {
	if ts.exp.exp.State == virga.ExperimentStopping {
		why, msg := stoppedBy(ts.exp)
		c.endTrial(it, ts, virga.TrialStopped, why, msg, search.Stopped, now)
		return
	}
	c.setTrial(it, ts, virga.TrialPaused, virga.ReasonPausedByUser, pausedByUser, now)
}

func ckptName(id string) string {
	if id == "" {
		return "the start"
	}
	if len(id) > 12 {
		id = id[:12]
	}
	return "checkpoint " + id
}

func describeExit(a *virga.Attempt) string {
	switch {
	case a.Outcome == virga.OutcomeTimeout:
		return "timeout"
	case a.Outcome == virga.OutcomeLost:
		if a.Message != "" {
			return "lost: " + a.Message
		}
		return "lost (no exit status)"
	case a.Outcome == virga.OutcomePreempted:
		how := ""
		switch {
		case a.Signal != "":
			how = " (signal " + a.Signal + ")"
		case a.ExitCode != nil:
			how = " (exit code " + strconv.Itoa(*a.ExitCode) + ")"
		}
		if a.Pool == "" {
			return "preempted: its capacity was reclaimed" + how
		}
		return "preempted: pool " + a.Pool + " reclaimed its capacity" + how
	case a.Signal != "":
		return "signal " + a.Signal
	case a.ExitCode != nil:
		return "exit code " + strconv.Itoa(*a.ExitCode)
	case a.Message != "":
		return a.Message
	}
	return string(a.Outcome)
}

// endTrial moves a trial to a terminal state for reason and tells its searcher.
func (c *Controller) endTrial(it *iteration, ts *trialState, state virga.TrialState, reason virga.Reason, msg string, out search.Outcome, now time.Time) {
	t := ts.t
	if !c.setTrial(it, ts, state, reason, msg, now) {
		return
	}
	ts.exp.searcher.Ended(t.ID, out)
	ts.exp.dirty = true
	it.touchExp(ts.exp)
	it.event(&virga.Event{ExperimentID: ts.exp.exp.ID, TrialID: t.ID, Kind: state.EndEvent(), Message: msg, Time: now})
}

// maybeFinish ends an experiment once nothing of it lives.
func (c *Controller) maybeFinish(it *iteration, es *expState) {
	if es.exp.State.Terminal() {
		return
	}
	for _, ts := range es.active { // settled trials have no attempt
		if ts.attempt != nil {
			return
		}
	}
	now := c.now()
	switch es.exp.State {
	case virga.ExperimentStopping:
		reason, msg := virga.ReasonStoppedByUser, "stopped by user"
		if es.exp.Reason == virga.ReasonBudgetSpent {
			reason, msg = virga.ReasonBudgetSpent, es.exp.Message
		}
		c.finishExperiment(it, es, virga.ExperimentStopped, reason, msg, now)
	case virga.ExperimentActive:
		if !es.exhausted && len(es.trials) < es.spec.MaxTrials {
			return
		}
		for _, ts := range es.trials {
			if !ts.t.State.Terminal() && !(es.exhausted && pausedBySearch(ts)) {
				return
			}
		}
		// The search is over: trials it paused and did not promote end here.
		for _, ts := range es.trials {
			if !ts.t.State.Terminal() {
				c.endTrial(it, ts, virga.TrialStopped, virga.ReasonNotPromoted, "not promoted by the searcher", search.Stopped, now)
			}
		}
		ts := make([]*virga.Trial, len(es.trials))
		for i, t := range es.trials {
			ts[i] = t.t
		}
		state, reason, msg := searchEnd(ts, es.spec.Objective.Metric)
		c.finishExperiment(it, es, state, reason, msg, now)
	}
}

// searchEnd decides how an experiment whose search is over ends, from its
// trials: COMPLETED when it has a result, some trial that reported the
// objective metric, unless every trial failed; FAILED otherwise, with the
// reason that says which and a message that says what to look at.
func searchEnd(trials []*virga.Trial, metric string) (virga.ExperimentState, virga.Reason, string) {
	failed, reported := 0, 0
	var lastFailed *virga.Trial
	for _, t := range trials {
		if t.State == virga.TrialFailed {
			failed++
			lastFailed = t
		}
		if t.Best != nil {
			reported++
		}
	}
	switch {
	case len(trials) > 0 && failed == len(trials):
		msg := fmt.Sprintf("all %d trials failed", failed)
		if failed == 1 {
			msg = "its only trial failed"
		}
		if lastFailed.Message != "" {
			msg += fmt.Sprintf(" (trial %d: %s)", lastFailed.ID, lastFailed.Message)
		}
		return virga.ExperimentFailed, virga.ReasonAllTrialsFailed, msg + fmt.Sprintf("; its output: virga logs %d", lastFailed.ID)
	case reported == 0:
		msg := fmt.Sprintf("no trial reported the objective metric %q", metric)
		if len(trials) == 0 {
			return virga.ExperimentFailed, virga.ReasonNoObjective, msg + " (the searcher proposed none)"
		}
		msg += fmt.Sprintf("; the trainer must report it under that name (virga logs %d shows what one printed)", trials[0].ID)
		if failed > 0 {
			msg += fmt.Sprintf("; %d of %d trials failed", failed, len(trials))
		}
		return virga.ExperimentFailed, virga.ReasonNoObjective, msg
	}
	return virga.ExperimentCompleted, virga.ReasonSearchFinished, ""
}

func (c *Controller) finishExperiment(it *iteration, es *expState, state virga.ExperimentState, reason virga.Reason, msg string, now time.Time) {
	if !c.setExp(it, es, state, reason, msg, now) {
		return
	}
	it.event(&virga.Event{ExperimentID: es.exp.ID, Kind: state.EndEvent(), Message: msg, Time: now})
	delete(c.exps, es.exp.ID)
	for _, ts := range es.trials {
		c.untrack(ts)
	}
}

func (c *Controller) checkTimeouts(it *iteration) {
	timed := false // most experiments have no timeout: then no attempt is visited
	for _, es := range c.exps {
		if es.spec.Timeout.D() > 0 {
			timed = true
			break
		}
	}
	if !timed {
		return
	}
	now := c.now()
	for _, ts := range c.attempts {
		d := ts.exp.spec.Timeout.D()
		if d <= 0 || ts.stopping != notStopping || ts.attempt.Backend == apiBackend {
			continue
		}
		if now.Sub(ts.started) > d {
			ts.stopping = stopTimeout
			a := ts.attempt
			it.event(&virga.Event{ExperimentID: ts.exp.exp.ID, TrialID: ts.t.ID, AttemptID: a.ID, Kind: virga.EventAttemptTimeout,
				Message: "ran longer than " + d.String(), Time: now})
			grace := ts.exp.spec.StopGrace.D()
			it.after = append(it.after, func() { _ = c.cfg.Backend.Stop(a.ID, grace) })
		}
	}
}

// sizer is a backend that knows the most it can ever offer.
type sizer interface {
	Capacity() virga.Resources
}

func fmtResources(r virga.Resources) string {
	return fmt.Sprintf("cpu %g, memory %d MiB, gpu %d", r.CPU, r.MemoryMB, r.GPU)
}

// resources is what a trial of s holds while it runs: per node times its
// nodes (a gang holds all of its nodes at once).
func resources(s *spec.Experiment) virga.Resources {
	cpu, mem, gpu := s.Resources.Total()
	return virga.Resources{CPU: cpu, MemoryMB: mem, GPU: gpu}
}

// schedule fills free concurrency slots: queued trials first (restarts and
// resumed trials), then new proposals, as long as the resources fit. On a
// backend with pools, each trial that starts is placed on a pool by
// Config.Place, and stays queued if it picks none.
func (c *Controller) schedule(it *iteration) {
	free := c.cfg.Backend.Free().Sub(c.inflight)
	pools := c.poolStatus() // nil: the backend has no pools
	now := c.now()
	ids := make([]int64, 0, len(c.exps))
	for id := range c.exps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		es := c.exps[id]
		if es.exp.State != virga.ExperimentActive || es.spec.DriveByAPI() {
			c.maybeFinish(it, es)
			continue
		}
		res := resources(es.spec)
		if fits, most, where, known := c.fitsEver(pools, res); known && !fits && running(es) == 0 {
			// No trial can ever start: say so rather than wait forever,
			// and end the trials waiting for a start with the experiment
			// (queued restarts, paused trials), so none stays live under
			// a FAILED experiment.
			msg := fmt.Sprintf("each trial needs %s but %s has at most %s: lower resources in the experiment file or give the server more capacity",
				fmtResources(res), where, fmtResources(most))
			for _, ts := range es.trials {
				if !ts.t.State.Terminal() && ts.attempt == nil {
					c.endTrial(it, ts, virga.TrialStopped, virga.ReasonUnschedulable, msg, search.Stopped, now)
				}
			}
			c.finishExperiment(it, es, virga.ExperimentFailed, virga.ReasonUnschedulable, msg, now)
			continue
		}
		if pools != nil && c.usePolicy(es) && c.schedulePolicy(it, es, pools, &free, now) {
			continue
		}
		running := running(es)
		chosen := map[*trialState]bool{}
		pending := 0.0 // expected cost of the trials chosen in this pass
		for running < es.spec.MaxConcurrent && (pools == nil && res.Fits(free) || pools != nil && poolRoom(pools, res)) {
			var next *trialState
			for _, ts := range es.trials {
				if ts.t.State == virga.TrialQueued && ts.attempt == nil && !chosen[ts] && !now.Before(ts.notBefore) {
					next = ts
					break
				}
			}
			if next == nil {
				if ok, why := c.budgetAllowsNew(es, res, pools, now, pending); !ok {
					if running == 0 {
						c.stopForBudget(it, es, why, now)
					}
					break
				}
				next = c.propose(it, es, running)
				if next == nil {
					break
				}
			}
			if pools != nil && !c.place(next, res, pools, now) {
				break // it waits, queued, for a pool
			}
			if ok, why := c.budgetFits(es, next, res, now, &pending); !ok {
				if pools != nil {
					c.releasePool(next.pool, res) // place reserved it
					next.pool = ""
				}
				if running == 0 {
					c.stopForBudget(it, es, why, now)
				}
				break
			}
			chosen[next] = true
			free = free.Sub(res)
			c.inflight = c.inflight.Add(res)
			it.toStart = append(it.toStart, next)
			running++
		}
		if len(chosen) == 0 {
			c.maybeFinish(it, es)
		}
	}
}

// propose asks the searcher for a new trial (or a trial to resume).
func (c *Controller) propose(it *iteration, es *expState, running int) *trialState {
	if es.exhausted {
		return nil
	}
	p, err := es.searcher.Propose()
	es.dirty = true
	it.touchExp(es)
	switch {
	case errors.Is(err, search.ErrExhausted):
		es.exhausted = true
		return nil
	case errors.Is(err, search.ErrWait):
		if running == 0 && !hasLive(es) {
			c.log.Warn("searcher waits with nothing running; ending the search", "experiment", es.exp.ID)
			es.exhausted = true
		}
		return nil
	case err != nil:
		c.log.Error("searcher failed", "experiment", es.exp.ID, "err", err)
		es.exhausted = true
		return nil
	}
	if p.Resume != 0 {
		ts := c.trials[p.Resume]
		if ts == nil || ts.exp != es || ts.t.State != virga.TrialPaused || ts.attempt != nil {
			c.log.Error("searcher asked to resume a trial that cannot be resumed", "experiment", es.exp.ID, "trial", p.Resume)
			return nil
		}
		if !c.setTrial(it, ts, virga.TrialQueued, virga.ReasonResumedBySearcher, "resumed by the searcher", c.now()) {
			return nil
		}
		return ts
	}
	now := c.now()
	ts := &trialState{exp: es, t: &virga.Trial{
		ExperimentID: es.exp.ID, Seq: len(es.trials) + 1, Request: p.ID, HParams: p.HParams, CreatedAt: now,
	}}
	if !c.setTrial(it, ts, virga.TrialQueued, virga.ReasonNone, "", now) {
		return nil
	}
	if p.Parent != 0 {
		c.inherit(ts, p.Parent)
	}
	es.addTrial(ts)
	return ts
}

// inherit makes a new trial continue from its parent's latest checkpoint
// (population based training): its first attempt restores that checkpoint,
// which stays on disk while the trial starts from it (checkpointShared).
func (c *Controller) inherit(ts *trialState, parentID int64) {
	t := ts.t
	t.Parent = parentID
	parent := c.trials[parentID]
	if parent == nil || parent.t.Checkpoint == "" {
		c.log.Warn("searcher asked to continue from a trial without a checkpoint; the new trial starts from scratch",
			"experiment", t.ExperimentID, "parent", parentID)
		return
	}
	t.ParentCheckpoint = parent.t.Checkpoint
	c.setCheckpoint(ts, parent.t.Checkpoint)
	for _, ck := range parent.ckpts {
		if ck.ID == parent.t.Checkpoint {
			t.ParentStep = ck.Step
		}
	}
	t.Message = fmt.Sprintf("continues from trial %d at step %d", parent.t.Seq, t.ParentStep)
}

// running counts the experiment's trials with a live attempt.
func running(es *expState) int {
	n := 0
	for _, ts := range es.active {
		if ts.attempt != nil {
			n++
		}
	}
	return n
}

func hasLive(es *expState) bool {
	for _, ts := range es.active {
		if ts.attempt != nil || ts.t.State == virga.TrialQueued {
			return true
		}
	}
	return false
}

type launch struct {
	ts      *trialState
	la      *liveAttempt
	spec    *backend.StartSpec
	restore string
}

// fill completes what is known only once the attempt is committed: the
// trial's and the attempt's IDs, the attempt's directory and how to start it.
func (l *launch) fill(c *Controller) {
	a, t := l.ts.attempt, l.ts.t
	l.la.attemptID, l.la.trialID = a.ID, t.ID
	c.pendingEvents = append(c.pendingEvents, &virga.Event{ExperimentID: t.ExperimentID, TrialID: t.ID, AttemptID: a.ID,
		Kind: virga.EventAttemptCreated, Message: "attempt " + strconv.Itoa(a.Number) + " from " + ckptName(a.Restored), Time: a.CreatedAt})
	if a.Backend == apiBackend {
		return
	}
	if !c.remote {
		l.la.ckptDir = c.TrialDir(t.ID)
	}
	a.Dir = c.AttemptDir(a.ID) // recorded with the attempt's next change (it started)
	l.spec = c.startSpec(l.ts, a)
}

const apiBackend = "api"

// createAttempts adds an attempt for each trial that starts. The attempt of
// a trial inserted by the same batch is linked to it (store.NewAttempt).
func (c *Controller) createAttempts(it *iteration, trials []*trialState) []launch {
	now := c.now()
	var out []launch
	for _, ts := range trials {
		t := ts.t
		n := t.Attempts + 1
		a := &virga.Attempt{TrialID: t.ID, Number: n, State: virga.AttemptStarting, Backend: c.cfg.Backend.Name(),
			Pool: ts.pool, Restored: t.Checkpoint, CreatedAt: now}
		ts.pool = ""
		if _, asked := it.asks[ts]; asked {
			a.Backend, a.State, a.StartedAt = apiBackend, virga.AttemptRunning, now
		}
		if !c.setTrial(it, ts, virga.TrialRunning, virga.ReasonNone, "", now) {
			continue
		}
		t.Attempts = n
		ts.attempt = a
		ts.started = now
		ts.alive = time.Time{}
		ts.stopping = notStopping
		if t.ID == 0 {
			it.b.NewAttempts = append(it.b.NewAttempts, store.NewAttempt{Trial: t, Attempt: a})
		} else {
			it.b.Attempts = append(it.b.Attempts, a)
		}
		it.touchTrial(ts)
		out = append(out, launch{ts: ts, la: &liveAttempt{experimentID: t.ExperimentID, lastID: t.Checkpoint}, restore: t.Checkpoint})
	}
	return out
}

func (c *Controller) reportURL(attemptID int64) string {
	return c.cfg.ReportBase + "/api/v1/attempts/" + strconv.FormatInt(attemptID, 10) + "/report"
}

// startSpec builds what the backend needs to start a committed attempt.
func (c *Controller) startSpec(ts *trialState, a *virga.Attempt) *backend.StartSpec {
	t, es := ts.t, ts.exp
	hp, _ := json.Marshal(t.HParams)
	token := TrialToken(c.cfg.Secret, t.ID)
	env := map[string]string{}
	for k, v := range es.spec.Entrypoint.Env {
		if filled, err := spec.FillString(v, t.HParams); err == nil {
			env[k] = filled
		} else {
			env[k] = v
		}
	}
	env["VIRGA_EXPERIMENT_ID"] = strconv.FormatInt(es.exp.ID, 10)
	env["VIRGA_TRIAL_ID"] = strconv.FormatInt(t.ID, 10)
	env["VIRGA_HPARAMS"] = string(hp)
	if !c.remote {
		env["VIRGA_CHECKPOINT_DIR"] = c.TrialDir(t.ID)
	}
	env["VIRGA_TOKEN"] = token
	env["VIRGA_ATTEMPT_ID"] = strconv.FormatInt(a.ID, 10)
	env["VIRGA_REPORT_URL"] = c.reportURL(a.ID)
	argv, err := spec.FillArgv(es.spec.Entrypoint.Argv, t.HParams)
	if err != nil {
		argv = es.spec.Entrypoint.Argv // validated at submission; keep going
	}
	return &backend.StartSpec{AttemptID: a.ID, TrialID: t.ID, ExperimentID: es.exp.ID, Argv: argv, Env: env,
		Workdir: es.spec.Entrypoint.Workdir, Resources: resources(es.spec), Dir: a.Dir,
		ReportURL: env["VIRGA_REPORT_URL"], Token: token, Pool: a.Pool,
		Nodes: max(es.spec.Resources.Nodes, 1), ProcessesPerNode: max(es.spec.Resources.ProcessesPerNode, 1),
		Checkpoint: a.Restored, Timeout: es.spec.Timeout.D(), StopGrace: es.spec.StopGrace.D()}
}

// launch prepares the attempt's directories (restoring the checkpoint) and
// starts it, off the loop goroutine. A failure comes back as startFailed.
func (c *Controller) launch(ctx context.Context, l launch) {
	err := func() error {
		l.la.mu.Lock()
		defer l.la.mu.Unlock()
		if err := os.MkdirAll(l.spec.Dir, 0o755); err != nil {
			return fmtErr("creating attempt directory", err)
		}
		if c.remote {
			// The agent on the node fetches the checkpoint to restore.
			l.la.lastID, l.la.restore = l.restore, l.restore
			return nil
		}
		if l.restore != "" {
			if err := c.cfg.Checkpoints.Restore(l.restore, l.la.ckptDir); err != nil {
				return fmtErr("restoring checkpoint", err)
			}
		} else {
			if err := os.RemoveAll(l.la.ckptDir); err != nil {
				return fmtErr("clearing checkpoint directory", err)
			}
			if err := os.MkdirAll(l.la.ckptDir, 0o755); err != nil {
				return fmtErr("creating checkpoint directory", err)
			}
		}
		fp, err := checkpoint.Fingerprint(l.la.ckptDir)
		if err != nil {
			return fmtErr("fingerprinting checkpoint directory", err)
		}
		l.la.lastFP, l.la.lastID = fp, l.restore
		return nil
	}()
	if err == nil {
		err = c.cfg.Backend.Start(ctx, l.spec)
	}
	if err != nil {
		_ = c.send(context.Background(), startFailed{attemptID: l.la.attemptID, err: err})
	}
}
