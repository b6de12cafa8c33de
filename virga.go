// Package virga holds the domain types every part of Virga shares: experiments,
// trials, attempts, metrics, checkpoints and events, with their states.
// It owns no I/O and imports no other Virga package; subsystems live in
// internal/ and speak in these types.
package virga

import (
	"errors"
	"time"
)

// Sentinel errors shared across packages. Wrap them with context; test with errors.Is.
var (
	// ErrNotFound means the requested object does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict means the request contradicts the object's current state
	// (for example resuming a completed experiment).
	ErrConflict = errors.New("conflict")
	// ErrNotSupported means a backend or store cannot do what was asked.
	ErrNotSupported = errors.New("not supported")
	// ErrNoCapacity means a backend has no room for the requested resources now.
	ErrNoCapacity = errors.New("no capacity")
)

// ExperimentState is the life-cycle state of an experiment.
type ExperimentState string

// Experiment states. ACTIVE and PAUSED and STOPPING are live; the others are terminal.
const (
	ExperimentActive    ExperimentState = "ACTIVE"    // trials are being created and run
	ExperimentPaused    ExperimentState = "PAUSED"    // running trials were checkpointed and stopped; resumable
	ExperimentStopping  ExperimentState = "STOPPING"  // a stop was asked; waiting for trials to exit
	ExperimentCompleted ExperimentState = "COMPLETED" // the search finished
	ExperimentStopped   ExperimentState = "STOPPED"   // stopped by a user before the search finished
	ExperimentFailed    ExperimentState = "FAILED"    // could not go on or has no result (see Reason and Message)
)

// Terminal reports whether no further transition can happen.
func (s ExperimentState) Terminal() bool {
	return s == ExperimentCompleted || s == ExperimentStopped || s == ExperimentFailed
}

// ExperimentReason is the Reason of an experiment.
type ExperimentReason = Reason

// TrialState is the life-cycle state of a trial.
type TrialState string

// Trial states. QUEUED, RUNNING and PAUSED are live; the others are terminal.
const (
	TrialQueued    TrialState = "QUEUED"    // waiting for capacity or a concurrency slot
	TrialRunning   TrialState = "RUNNING"   // an attempt is starting or running
	TrialPaused    TrialState = "PAUSED"    // stopped with its checkpoint kept; will resume
	TrialCompleted TrialState = "COMPLETED" // the process exited 0 (or the search ended it normally)
	TrialStopped   TrialState = "STOPPED"   // ended early by the searcher or by a user
	TrialFailed    TrialState = "FAILED"    // failed more than max_restarts times
)

// Terminal reports whether no further transition can happen.
func (s TrialState) Terminal() bool {
	return s == TrialCompleted || s == TrialStopped || s == TrialFailed
}

// AttemptState is the life-cycle state of one run of a trial's process.
type AttemptState string

// Attempt states.
const (
	AttemptStarting AttemptState = "STARTING" // committed; the process may or may not exist yet
	AttemptRunning  AttemptState = "RUNNING"  // the process was seen running
	AttemptExited   AttemptState = "EXITED"   // the process ended; see ExitCode, Signal, Outcome
)

// Outcome says why an attempt ended.
type Outcome string

// Attempt outcomes.
const (
	OutcomeNone      Outcome = ""          // not ended
	OutcomeSucceeded Outcome = "SUCCEEDED" // exit code 0
	OutcomeFailed    Outcome = "FAILED"    // non-zero exit or killed by a signal it was not sent
	OutcomeStopped   Outcome = "STOPPED"   // Virga stopped it (early stop, pause, experiment stop)
	OutcomeLost      Outcome = "LOST"      // the process vanished without an exit status (e.g. host crash)
	OutcomeTimeout   Outcome = "TIMEOUT"   // ran past the trial timeout
	// OutcomePreempted: the capacity it ran on was reclaimed (a spot node
	// taken back, a Slurm preemption); not the trial's fault, so the trial is
	// resumed from its latest checkpoint without counting a restart.
	OutcomePreempted Outcome = "PREEMPTED"
)

// Experiment is one submitted experiment file and its progress.
type Experiment struct {
	ID       int64           `json:"id"`
	Name     string          `json:"name"`
	State    ExperimentState `json:"state"`
	Spec     []byte          `json:"-"`         // the experiment file exactly as submitted (YAML)
	SpecFile string          `json:"spec_file"` // the name it was submitted under, for messages
	// SearcherState is the searcher's latest snapshot; opaque to everyone but the searcher.
	SearcherState []byte `json:"-"`
	// Reason says why it is in its state (empty while it simply runs):
	// code decides on it, never on Message.
	Reason    Reason    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"` // why it ended or what it waits for, for people
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Trial is one configuration of hyperparameters and its progress.
type Trial struct {
	ID           int64          `json:"id"`
	ExperimentID int64          `json:"experiment_id"`
	Seq          int            `json:"seq"`     // 1-based number within the experiment
	Request      string         `json:"request"` // the searcher's proposal ID that created it
	State        TrialState     `json:"state"`
	HParams      map[string]any `json:"hparams"`
	Attempts     int            `json:"attempts"`         // attempts started so far
	Restarts     int            `json:"restarts"`         // failed attempts that were restarted
	Step         int64          `json:"step"`             // latest reported step
	Latest       *float64       `json:"latest,omitempty"` // latest objective value
	Best         *float64       `json:"best,omitempty"`   // best objective value so far
	BestStep     int64          `json:"best_step"`
	Checkpoint   string         `json:"checkpoint,omitempty"` // latest checkpoint ID
	// Parent is the trial this one continued from (population based training):
	// its first attempt restored a copy of ParentCheckpoint, taken at
	// ParentStep. Zero for a trial that started from scratch.
	Parent           int64  `json:"parent,omitempty"`
	ParentCheckpoint string `json:"parent_checkpoint,omitempty"`
	ParentStep       int64  `json:"parent_step,omitempty"`
	// Prediction is the searcher's forecast of the trial's final objective,
	// when its searcher predicts learning curves; nil otherwise.
	Prediction *Prediction `json:"prediction,omitempty"`
	// Reason says why it is in its state (empty when nothing more is to
	// be said): code decides on it, never on Message.
	Reason    Reason    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"` // the same for people
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Prediction is a forecast of a trial's objective at a later step, made from
// its learning curve so far.
type Prediction struct {
	Step    int64   `json:"step"`    // the last step the forecast saw
	Horizon int64   `json:"horizon"` // the step forecast (the trial's last)
	Mean    float64 `json:"mean"`    // expected objective at Horizon
	Std     float64 `json:"std"`     // its standard deviation
	// ProbBetter is the probability that the trial ends better than the best
	// value of the search so far.
	ProbBetter float64 `json:"prob_better"`
}

// Attempt is one run of a trial's process.
type Attempt struct {
	ID      int64        `json:"id"`
	TrialID int64        `json:"trial_id"`
	Number  int          `json:"number"` // 1-based within the trial
	State   AttemptState `json:"state"`
	Outcome Outcome      `json:"outcome,omitempty"`
	Backend string       `json:"backend"`
	Pool    string       `json:"pool,omitempty"` // the capacity pool it ran on (empty: the backend's default)
	// Cost is the dollars billed for its run so far (final once it ended), from
	// its pool's price over its run time and its share of the node.
	Cost float64 `json:"cost"`
	// LostCost is the part of Cost spent on work that a preemption threw away
	// (run time after its last checkpoint); zero unless Outcome is PREEMPTED.
	LostCost  float64   `json:"lost_cost,omitempty"`
	PID       int       `json:"pid,omitempty"` // the trial process (local backend)
	ExitCode  *int      `json:"exit_code,omitempty"`
	Signal    string    `json:"signal,omitempty"`   // signal that ended the process, e.g. "killed"
	Restored  string    `json:"restored,omitempty"` // checkpoint ID restored before it started
	Dir       string    `json:"dir,omitempty"`      // per-attempt directory (logs, exit status)
	Message   string    `json:"message,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
}

// Metric is one report of a trial: the values at a step. A trial has at most one
// metric row per step; a later report of the same step replaces the earlier one.
type Metric struct {
	TrialID   int64              `json:"trial_id"`
	AttemptID int64              `json:"attempt_id"`
	Step      int64              `json:"step"`
	Values    map[string]float64 `json:"values"`
	Time      time.Time          `json:"time"`
}

// Checkpoint is an immutable, content-addressed snapshot of a trial's checkpoint directory.
type Checkpoint struct {
	ID        string    `json:"id"` // hex SHA-256 of the directory's content
	TrialID   int64     `json:"trial_id"`
	AttemptID int64     `json:"attempt_id"`
	Step      int64     `json:"step"`
	Size      int64     `json:"size"`  // bytes of file content
	Files     int       `json:"files"` // number of regular files
	Time      time.Time `json:"time"`
}

// Event is one recorded transition, kept for history and live progress.
type Event struct {
	ID           int64     `json:"id"`
	ExperimentID int64     `json:"experiment_id"`
	TrialID      int64     `json:"trial_id,omitempty"`
	AttemptID    int64     `json:"attempt_id,omitempty"`
	Kind         EventKind `json:"kind"` // one of the Event* kinds
	Message      string    `json:"message,omitempty"`
	Time         time.Time `json:"time"`
}

// Resources is what one trial needs, or what a backend offers.
type Resources struct {
	CPU      float64 `json:"cpu"`       // cores
	MemoryMB int64   `json:"memory_mb"` // mebibytes
	GPU      int     `json:"gpu"`
}

// Fits reports whether r fits into free.
func (r Resources) Fits(free Resources) bool {
	return r.CPU <= free.CPU+1e-9 && r.MemoryMB <= free.MemoryMB && r.GPU <= free.GPU
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPU: r.CPU + o.CPU, MemoryMB: r.MemoryMB + o.MemoryMB, GPU: r.GPU + o.GPU}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPU: r.CPU - o.CPU, MemoryMB: r.MemoryMB - o.MemoryMB, GPU: r.GPU - o.GPU}
}
