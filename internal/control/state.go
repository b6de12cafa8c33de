package control

import (
	"time"

	"github.com/virga-ml/virga"
)

// Every change of a trial's or an experiment's state goes through setTrial
// or setExp, which apply virga's transition rules and record the typed
// reason next to the message. The loop decides on the reason (recovery, the
// budget, a searcher's pauses), never on the message, which stays text for
// people.

// The messages that go with the reasons the loop sets most often.
const (
	pausedByUser       = "paused by user"
	pausedBySearcher   = "paused by the searcher"
	pausingBySearcher  = "pausing: the searcher paused it at this step"
	stoppingBySearcher = "stopping: the searcher stopped it early"
)

// setTrial moves ts's trial to state to for reason, saying msg, and writes
// it with the iteration. An illegal transition is a bug of the loop: it is
// logged, changes nothing, and setTrial returns false.
func (c *Controller) setTrial(it *iteration, ts *trialState, to virga.TrialState, reason virga.Reason, msg string, now time.Time) bool {
	ended := !ts.t.State.Terminal() && to.Terminal()
	if err := ts.t.Transition(to, reason, msg, now); err != nil {
		c.log.Error("control: refused a state change", "experiment", ts.t.ExperimentID, "trial", ts.t.ID, "err", err)
		return false
	}
	if ended {
		c.met.trialsEnded.WithLabelValues(string(to)).Inc()
	}
	ts.unsettle()
	it.touchTrial(ts)
	return true
}

// setExp moves es's experiment to state to for reason, saying msg, and
// writes it with the iteration. An illegal transition is a bug of the loop:
// it is logged, changes nothing, and setExp returns false.
func (c *Controller) setExp(it *iteration, es *expState, to virga.ExperimentState, reason virga.Reason, msg string, now time.Time) bool {
	if err := es.exp.Transition(to, reason, msg, now); err != nil {
		c.log.Error("control: refused a state change", "experiment", es.exp.ID, "err", err)
		return false
	}
	it.touchExp(es)
	return true
}

// stoppedBy is the reason and message of a trial ended by its experiment's
// stop: its budget's or a user's.
func stoppedBy(es *expState) (virga.Reason, string) {
	if es.exp.Reason == virga.ReasonBudgetSpent {
		return virga.ReasonBudgetSpent, "stopped: the experiment's budget is spent"
	}
	return virga.ReasonStoppedByUser, "stopped by user"
}

// pausedBySearch reports whether the searcher paused a trial (and only the
// searcher may resume it).
func pausedBySearch(ts *trialState) bool {
	return ts.t.State == virga.TrialPaused && ts.t.Reason == virga.ReasonPausedBySearcher && ts.attempt == nil
}

// recoveredStop is why a live attempt found at recovery was being stopped,
// from the typed state of its trial and experiment. The reasons rank as
// when the loop stops an attempt (stopAttempt): a user's stop overrides
// all, a searcher's decision a user's pause.
func recoveredStop(ts *trialState) stopReason {
	switch {
	case ts.exp.exp.State == virga.ExperimentStopping:
		return stopUser
	case ts.t.Reason == virga.ReasonPausingBySearcher:
		return stopSearchPause
	case ts.t.Reason == virga.ReasonStoppingEarly:
		return stopEarly
	case ts.exp.exp.State == virga.ExperimentPaused:
		return stopPause
	case ts.t.Reason == virga.ReasonMoving:
		return stopMove // a move in flight: it waits again once stopped
	}
	return notStopping
}
