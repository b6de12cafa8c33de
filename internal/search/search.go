// Package search holds Virga's search algorithms. Each searcher is a
// deterministic state machine: the control loop tells it of trials created,
// metrics observed and trials ended, and asks it for proposals and decisions.
// A searcher owns no goroutines and does no I/O; its random source is seeded
// and saved with its snapshot, so a restarted server continues the same search.
package search

import (
	"errors"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/spec"
)

// Errors returned by Propose.
var (
	// ErrExhausted means the search will propose no more trials.
	ErrExhausted = errors.New("search exhausted")
	// ErrWait means the searcher has nothing to propose until it hears of more results.
	ErrWait = errors.New("search waits for results")
)

// Proposal is what a searcher asks the control loop to run next.
type Proposal struct {
	// ID identifies the proposal within the search ("r1", "r2", ...); the trial
	// created for it records it, and Created maps it to the trial ID.
	ID string `json:"id"`
	// HParams are the new trial's hyperparameters.
	HParams map[string]any `json:"hparams"`
	// Resume, when non-zero, asks to resume that (paused) trial instead of
	// creating a new one (ASHA promotion, PBT continuation).
	Resume int64 `json:"resume,omitempty"`
	// Parent, when non-zero, asks that the new trial start from that trial's
	// latest checkpoint (population based training); the new trial records it
	// as its lineage.
	Parent int64 `json:"parent,omitempty"`
}

// PauseAware is a searcher that pauses trials (Decision Pause) and must be
// told when a paused trial's process has exited, before it may resume it.
type PauseAware interface {
	Paused(trialID int64)
}

// Predictor is a searcher that forecasts trials' final objective values from
// their learning curves.
type Predictor interface {
	// Prediction returns the latest forecast for a trial, or nil.
	Prediction(trialID int64) *virga.Prediction
}

// Decision is a searcher's answer to a metric report.
type Decision int

// Decisions.
const (
	Continue Decision = iota // keep running
	Stop                     // end the trial early (it is done, not failed)
	Pause                    // checkpoint and stop; the searcher may Resume it later
)

func (d Decision) String() string {
	switch d {
	case Continue:
		return "continue"
	case Stop:
		return "stop"
	case Pause:
		return "pause"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Outcome says how a trial ended, as told to a searcher.
type Outcome int

// Outcomes.
const (
	Completed Outcome = iota // ran to its end
	Stopped                  // stopped early (by the searcher or a user)
	Failed                   // failed past its restarts; its results may be partial
)

// Searcher is a search algorithm. Methods are called from one goroutine.
type Searcher interface {
	// Propose returns the next trial to run, ErrWait when it must first hear of
	// more results, or ErrExhausted when the search is over. Each Proposal is
	// followed by a call to Created once the trial is committed.
	Propose() (Proposal, error)
	// Created tells the searcher that proposal id became trial trialID.
	Created(id string, trialID int64)
	// Observe tells the searcher of a reported objective value and returns
	// whether the trial should go on.
	Observe(trialID int64, step int64, value float64) Decision
	// Ended tells the searcher that a trial ended.
	Ended(trialID int64, outcome Outcome)
	// Snapshot returns the searcher's whole state, random source included.
	Snapshot() ([]byte, error)
	// Restore replaces the searcher's state with a snapshot's.
	Restore(snapshot []byte) error
}

// Factory makes a searcher for an experiment from its parsed spec and seed.
type Factory func(e *spec.Experiment, seed uint64) (Searcher, error)

// Registry maps searcher names to factories. Registration is explicit.
type Registry map[string]Factory
