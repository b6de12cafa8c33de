package virga

import (
	"errors"
	"fmt"
	"time"
)

// ErrIllegalTransition means a trial or an experiment was asked to go to a
// state it cannot reach from its current one.
var ErrIllegalTransition = errors.New("illegal state transition")

// Reason says why a trial or an experiment is in its state, as a stable
// CamelCase word: code (recovery, the budget, the searcher's pauses) and
// scripts decide on it; the Message beside it says the same for people and
// may be reworded freely. Empty when nothing more than the state is to be
// said (a trial running or waiting normally, an experiment running).
type Reason string

// ReasonNone is the empty reason.
const ReasonNone Reason = ""

// Reasons of experiments.
const (
	// ReasonPausedByUser (PAUSED): a user paused it. Of a trial (PAUSED):
	// its experiment was paused; the user's resume resumes it.
	ReasonPausedByUser Reason = "PausedByUser"
	// ReasonStoppedByUser (STOPPING, then STOPPED): a user stopped it. Of a
	// trial (STOPPED): its experiment was stopped by a user.
	ReasonStoppedByUser Reason = "StoppedByUser"
	// ReasonBudgetSpent (STOPPING, then STOPPED): its budget or deadline left
	// no room for another trial. Of a trial (STOPPED): stopped with it.
	ReasonBudgetSpent Reason = "BudgetSpent"
	// ReasonSearchFinished (COMPLETED): the searcher ran its trials and at
	// least one reported the objective metric.
	ReasonSearchFinished Reason = "SearchFinished"
	// ReasonAllTrialsFailed (FAILED): the search ended and every trial failed.
	ReasonAllTrialsFailed Reason = "AllTrialsFailed"
	// ReasonNoObjective (FAILED): the search ended and no trial reported the
	// objective metric, so there is no best trial.
	ReasonNoObjective Reason = "NoObjectiveReported"
	// ReasonUnschedulable (FAILED experiment, STOPPED trial): no trial can
	// ever fit the capacity.
	ReasonUnschedulable Reason = "Unschedulable"
	// ReasonUnrecoverable (FAILED): after a restart of the server its spec
	// or searcher state could not be loaded.
	ReasonUnrecoverable Reason = "Unrecoverable"
)

// Reasons of trials (besides ReasonPausedByUser, ReasonStoppedByUser and
// ReasonBudgetSpent, which they share with experiments).
const (
	// ReasonPausingBySearcher (RUNNING): the searcher paused it; its attempt
	// is stopping, and its exit is the pause.
	ReasonPausingBySearcher Reason = "PausingBySearcher"
	// ReasonPausedBySearcher (PAUSED): the searcher paused it; only the
	// searcher resumes it (promotes it), or the search's end stops it.
	ReasonPausedBySearcher Reason = "PausedBySearcher"
	// ReasonStoppingEarly (RUNNING): the searcher stopped it early; its
	// attempt is stopping, and its exit ends the trial.
	ReasonStoppingEarly Reason = "StoppingEarly"
	// ReasonStoppedEarly (STOPPED): the searcher stopped it early.
	ReasonStoppedEarly Reason = "StoppedEarly"
	// ReasonMoving (RUNNING): the experiment policy moves it to another pool
	// (or to wait); its attempt is stopping, and once it exits the trial
	// waits to resume from its checkpoint without counting a restart.
	ReasonMoving Reason = "Moving"
	// ReasonMoved (QUEUED): its attempt was stopped by a move; it resumes
	// where the policy places it.
	ReasonMoved Reason = "Moved"
	// ReasonPreempted (QUEUED): its capacity was reclaimed; it resumes from
	// its latest checkpoint without counting a restart.
	ReasonPreempted Reason = "Preempted"
	// ReasonRestarting (QUEUED): its attempt failed (or was lost or timed
	// out) and it restarts from its latest checkpoint.
	ReasonRestarting Reason = "Restarting"
	// ReasonWaitingForCapacity (QUEUED): its start was refused for lack of
	// room; it is tried again later.
	ReasonWaitingForCapacity Reason = "WaitingForCapacity"
	// ReasonRequeued (QUEUED): it was marked running when the server
	// stopped, before its attempt was recorded.
	ReasonRequeued Reason = "Requeued"
	// ReasonResumedByUser (QUEUED): a user resumed its experiment.
	ReasonResumedByUser Reason = "ResumedByUser"
	// ReasonResumedBySearcher (QUEUED): the searcher promoted it.
	ReasonResumedBySearcher Reason = "ResumedBySearcher"
	// ReasonSucceeded (COMPLETED): its process exited 0 (or its API caller
	// told that it succeeded).
	ReasonSucceeded Reason = "Succeeded"
	// ReasonNotPromoted (STOPPED): the search ended with it paused.
	ReasonNotPromoted Reason = "NotPromoted"
	// ReasonRestartsExhausted (FAILED): it failed more than max_restarts
	// times.
	ReasonRestartsExhausted Reason = "RestartsExhausted"
	// ReasonPreemptedWithoutProgress (FAILED): it was preempted too many
	// times in a row without saving a new checkpoint.
	ReasonPreemptedWithoutProgress Reason = "PreemptedWithoutProgress"
)

// ExperimentReasons returns every reason an experiment may have, the empty
// one first.
func ExperimentReasons() []Reason {
	return []Reason{ReasonNone, ReasonPausedByUser, ReasonStoppedByUser, ReasonBudgetSpent, ReasonSearchFinished,
		ReasonAllTrialsFailed, ReasonNoObjective, ReasonUnschedulable, ReasonUnrecoverable}
}

// TrialReasons returns every reason a trial may have, the empty one first.
func TrialReasons() []Reason {
	return []Reason{ReasonNone, ReasonPausingBySearcher, ReasonStoppingEarly, ReasonMoving, ReasonPausedBySearcher,
		ReasonPausedByUser, ReasonResumedByUser, ReasonResumedBySearcher, ReasonWaitingForCapacity, ReasonRequeued,
		ReasonRestarting, ReasonMoved, ReasonPreempted, ReasonSucceeded, ReasonStoppedEarly, ReasonStoppedByUser,
		ReasonBudgetSpent, ReasonNotPromoted, ReasonRestartsExhausted, ReasonPreemptedWithoutProgress, ReasonUnschedulable}
}

// trialTransitions lists, for each trial state, the states it may go to.
// The empty state is a trial not yet created.
var trialTransitions = map[TrialState][]TrialState{
	"":           {TrialQueued},
	TrialQueued:  {TrialRunning, TrialStopped},
	TrialRunning: {TrialRunning, TrialQueued, TrialPaused, TrialCompleted, TrialStopped, TrialFailed},
	TrialPaused:  {TrialQueued, TrialStopped},
}

// experimentTransitions lists, for each experiment state, the states it may
// go to. The empty state is an experiment not yet created.
var experimentTransitions = map[ExperimentState][]ExperimentState{
	"":                 {ExperimentActive},
	ExperimentActive:   {ExperimentPaused, ExperimentStopping, ExperimentCompleted, ExperimentFailed},
	ExperimentPaused:   {ExperimentActive, ExperimentStopping, ExperimentFailed},
	ExperimentStopping: {ExperimentStopping, ExperimentStopped, ExperimentFailed},
}

func allowed[S comparable](table map[S][]S, from, to S) bool {
	for _, s := range table[from] {
		if s == to {
			return true
		}
	}
	return false
}

// CanBecome reports whether a trial in state s may go to state to. A
// running trial may "go" to RUNNING: its reason changes (the searcher
// pauses or stops it, the policy moves it) while its attempt stops.
func (s TrialState) CanBecome(to TrialState) bool { return allowed(trialTransitions, s, to) }

// CanBecome reports whether an experiment in state s may go to state to. A
// stopping experiment may "go" to STOPPING: a user's stop overrides its
// budget's.
func (s ExperimentState) CanBecome(to ExperimentState) bool {
	return allowed(experimentTransitions, s, to)
}

// Transition moves t to state to, for reason, saying msg to people; a
// terminal state also sets EndedAt to now. It is the only way Virga changes
// a trial's state. An illegal transition returns an error wrapping
// ErrIllegalTransition and changes nothing.
func (t *Trial) Transition(to TrialState, reason Reason, msg string, now time.Time) error {
	if !t.State.CanBecome(to) {
		return fmt.Errorf("trial %d from %s to %s (%s): %w", t.ID, describeState(string(t.State)), to, reason, ErrIllegalTransition)
	}
	t.State, t.Reason, t.Message = to, reason, msg
	if to.Terminal() {
		t.EndedAt = now
	}
	return nil
}

// Transition moves e to state to, for reason, saying msg to people; a
// terminal state also sets EndedAt to now. It is the only way Virga changes
// an experiment's state. An illegal transition returns an error wrapping
// ErrIllegalTransition and changes nothing.
func (e *Experiment) Transition(to ExperimentState, reason Reason, msg string, now time.Time) error {
	if !e.State.CanBecome(to) {
		return fmt.Errorf("experiment %d from %s to %s (%s): %w", e.ID, describeState(string(e.State)), to, reason, ErrIllegalTransition)
	}
	e.State, e.Reason, e.Message = to, reason, msg
	if to.Terminal() {
		e.EndedAt = now
	}
	return nil
}

func describeState(s string) string {
	if s == "" {
		return "nothing (not created)"
	}
	return s
}

// EventKind names what an Event records, as "object.what".
type EventKind string

// Event kinds.
const (
	EventExperimentCreated   EventKind = "experiment.created"
	EventExperimentEstimate  EventKind = "experiment.estimate" // Message: the forecast submitted with it (JSON)
	EventExperimentStop      EventKind = "experiment.stop"     // a user asked to stop it
	EventExperimentPause     EventKind = "experiment.pause"    // a user asked to pause it
	EventExperimentResume    EventKind = "experiment.resume"   // a user asked to resume it
	EventExperimentBudget    EventKind = "experiment.budget"   // its budget stops it
	EventExperimentLate      EventKind = "experiment.late"     // its deadline cannot be met
	EventExperimentCompleted EventKind = "experiment.completed"
	EventExperimentStopped   EventKind = "experiment.stopped"
	EventExperimentFailed    EventKind = "experiment.failed"

	EventTrialDecision   EventKind = "trial.decision" // the searcher stops or pauses it
	EventTrialRestarting EventKind = "trial.restarting"
	EventTrialMoving     EventKind = "trial.moving" // the policy moves it; its attempt stops
	EventTrialMoved      EventKind = "trial.moved"
	EventTrialPreempted  EventKind = "trial.preempted"
	EventTrialCompleted  EventKind = "trial.completed"
	EventTrialStopped    EventKind = "trial.stopped"
	EventTrialFailed     EventKind = "trial.failed"

	EventAttemptCreated EventKind = "attempt.created"
	EventAttemptStarted EventKind = "attempt.started"
	EventAttemptExited  EventKind = "attempt.exited"
	EventAttemptTimeout EventKind = "attempt.timeout"
	EventAttemptAdopted EventKind = "attempt.adopted" // a restarted server took it over
)

// EventKinds returns every event kind.
func EventKinds() []EventKind {
	return []EventKind{EventExperimentCreated, EventExperimentEstimate, EventExperimentStop, EventExperimentPause,
		EventExperimentResume, EventExperimentBudget, EventExperimentLate, EventExperimentCompleted,
		EventExperimentStopped, EventExperimentFailed, EventTrialDecision, EventTrialRestarting, EventTrialMoving,
		EventTrialMoved, EventTrialPreempted, EventTrialCompleted, EventTrialStopped, EventTrialFailed,
		EventAttemptCreated, EventAttemptStarted, EventAttemptExited, EventAttemptTimeout, EventAttemptAdopted}
}

// EndEvent is the kind of the event that records a trial ending in the
// terminal state s ("" for a state that is not terminal).
func (s TrialState) EndEvent() EventKind {
	switch s {
	case TrialCompleted:
		return EventTrialCompleted
	case TrialStopped:
		return EventTrialStopped
	case TrialFailed:
		return EventTrialFailed
	}
	return ""
}

// EndEvent is the kind of the event that records an experiment ending in
// the terminal state s ("" for a state that is not terminal).
func (s ExperimentState) EndEvent() EventKind {
	switch s {
	case ExperimentCompleted:
		return EventExperimentCompleted
	case ExperimentStopped:
		return EventExperimentStopped
	case ExperimentFailed:
		return EventExperimentFailed
	}
	return ""
}
