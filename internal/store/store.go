// Package store defines how Virga persists its state: one interface with an
// embedded SQLite implementation (the default), a PostgreSQL one and an
// in-memory one for the simulator (memory), all passing the conformance
// suite in storetest. It decides nothing: the control
// loop is its only writer and says what to commit.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/virga-ml/virga"
)

// ErrUnavailable means a store's database cannot be reached yet or is not
// ready for connections (starting up, recovering, shutting down): opening it
// again later may succeed. A store's Open wraps it; an error without it
// (a wrong password, a bad URL, a missing database) will not go away by
// waiting.
var ErrUnavailable = errors.New("the database is unavailable")

// Batch is a set of changes committed in one transaction, all or nothing.
//
// Rows whose ID is 0 are inserted and their ID field is set on success;
// rows with an ID update the stored row of that ID (ErrNotFound if none).
//
// An update writes every field except those fixed at insertion, which it
// leaves unchanged, ignoring the values given for them:
//   - Experiment: Name, Spec, SpecFile, CreatedAt;
//   - Trial: ExperimentID, Seq, Request, HParams, Parent, ParentCheckpoint,
//     ParentStep, CreatedAt (a trial's lineage is decided when it is created;
//     its Prediction is not, and an update writes it, nil included);
//   - Attempt: TrialID, Number, Backend, CreatedAt.
//
// So an update costs what changes (a trial's progress, an experiment's
// searcher state), not the size of its spec or hyperparameters. An Event
// with an ID replaces the stored event whole.
// Experiments are applied first, then trials, attempts, checkpoints, metrics
// and events, so a batch may insert a trial and, in the same batch, an attempt
// for it only if the trial's ID is already known (insert the trial in an earlier
// batch, or set Attempt.TrialID after the trial insert via a later batch).
//
// Metrics are upserted on (trial_id, step): a later report of a step replaces
// the earlier one. Checkpoints are inserted once per (trial_id, id); a repeat
// is ignored.
type Batch struct {
	Experiments []*virga.Experiment
	Trials      []*virga.Trial
	// NewAttempts are attempts of trials that this same batch inserts: each
	// is inserted right after Trials, its TrialID taken from its trial's new ID.
	NewAttempts []NewAttempt
	// NewExperimentEvents are events of experiments that this same batch
	// inserts (its Experiments with ID 0): each is inserted after its
	// experiment and before the batch's other events, its ExperimentID
	// taken from the experiment's new ID. So an experiment and what is said
	// of it at its creation (the estimate submitted with it) are stored in
	// one transaction.
	NewExperimentEvents []NewExperimentEvent
	Attempts            []*virga.Attempt
	Checkpoints         []virga.Checkpoint
	// DeleteCheckpoints removes checkpoint records (the files are the caller's).
	DeleteCheckpoints []CheckpointRef
	Metrics           []virga.Metric
	Events            []*virga.Event
}

// NewAttempt pairs an attempt with the trial, inserted in the same batch, that
// it belongs to.
type NewAttempt struct {
	Trial   *virga.Trial
	Attempt *virga.Attempt
}

// NewExperimentEvent pairs an event with the experiment, inserted in the
// same batch, that it belongs to.
type NewExperimentEvent struct {
	Experiment *virga.Experiment
	Event      *virga.Event
}

// CheckpointRef names one checkpoint record of one trial.
type CheckpointRef struct {
	TrialID int64
	ID      string
}

// Empty reports whether the batch holds no change.
func (b *Batch) Empty() bool {
	return len(b.Experiments)+len(b.Trials)+len(b.NewAttempts)+len(b.NewExperimentEvents)+len(b.Attempts)+len(b.Checkpoints)+
		len(b.DeleteCheckpoints)+len(b.Metrics)+len(b.Events) == 0
}

// ExperimentFilter selects experiments. Zero values select everything.
type ExperimentFilter struct {
	States []virga.ExperimentState
	Limit  int // 0 means no limit
}

// MetricFilter selects the metrics of one trial, ordered by step.
type MetricFilter struct {
	TrialID   int64
	AfterStep int64 // only steps > AfterStep; use -1 for all (steps may be 0)
	Limit     int   // 0 means no limit
}

// EventFilter selects events ordered by ID.
type EventFilter struct {
	ExperimentID int64 // 0 means any
	TrialID      int64 // 0 means any
	AfterID      int64
	Limit        int // 0 means no limit
}

// Token is an API credential. Only a hash of the secret is stored.
type Token struct {
	ID        int64
	Name      string
	Hash      []byte // SHA-256 of the secret
	CreatedAt time.Time
}

// Store is Virga's persistent state. Implementations are safe for concurrent
// use; every method that returns successfully has made its change durable.
// Lookups of a missing object return an error wrapping virga.ErrNotFound.
// What a read returns belongs to the caller, who may change it; what a write
// is given is not kept (the caller may change it after the call returns).
type Store interface {
	Models

	// Apply commits b in one transaction (see Batch).
	Apply(ctx context.Context, b *Batch) error

	// Experiment returns one experiment with its spec and searcher state.
	Experiment(ctx context.Context, id int64) (*virga.Experiment, error)
	// Experiments lists experiments, newest first.
	Experiments(ctx context.Context, f ExperimentFilter) ([]*virga.Experiment, error)
	// Trial returns one trial.
	Trial(ctx context.Context, id int64) (*virga.Trial, error)
	// Trials lists an experiment's trials ordered by Seq.
	Trials(ctx context.Context, experimentID int64) ([]*virga.Trial, error)
	// Attempt returns one attempt; virga.ErrNotFound if it never existed.
	Attempt(ctx context.Context, id int64) (*virga.Attempt, error)
	// Attempts lists a trial's attempts ordered by Number.
	Attempts(ctx context.Context, trialID int64) ([]*virga.Attempt, error)
	// ExperimentAttempts lists the attempts of all an experiment's trials,
	// ordered by trial ID and Number (what its cost is summed over).
	ExperimentAttempts(ctx context.Context, experimentID int64) ([]*virga.Attempt, error)
	// LiveAttempts lists every attempt not in state EXITED, ordered by ID.
	LiveAttempts(ctx context.Context) ([]*virga.Attempt, error)
	// Metrics lists a trial's metrics ordered by step.
	Metrics(ctx context.Context, f MetricFilter) ([]virga.Metric, error)
	// Checkpoints lists a trial's checkpoints, oldest first.
	Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error)
	// Events lists events ordered by ID.
	Events(ctx context.Context, f EventFilter) ([]virga.Event, error)

	// PutToken stores a token (inserting it when ID is 0 and setting ID).
	PutToken(ctx context.Context, t *Token) error
	// TokenByHash finds a token by the hash of its secret.
	TokenByHash(ctx context.Context, hash []byte) (*Token, error)

	// SchemaVersion returns the version of the newest migration applied.
	SchemaVersion(ctx context.Context) (int, error)
	// Close releases the store's resources.
	Close() error
}

// Models is the model registry's part of a Store: named models, their
// immutable versions and their aliases. Unlike experiments, they are not
// written through Apply: each method is a transaction of its own, because
// the registry's writes touch no experiment, trial or attempt and so need no
// ordering with the control loop's batches (see docs/architecture.md).
// Files are the caller's: the store keeps only their ID (FilesID).
type Models interface {
	// RegisterModelVersion stores v as the next version of v.Name (1 for a
	// name never registered) and sets v.Version; the number is taken in the
	// same transaction as the insert, so concurrent registrations get
	// distinct numbers, and numbers are never reused after a delete. The
	// Version given is ignored.
	RegisterModelVersion(ctx context.Context, v *virga.ModelVersion) error
	// Models lists the models that have at least one version, by name.
	Models(ctx context.Context) ([]virga.Model, error)
	// ModelVersions lists a model's versions, oldest first (none: an empty
	// list, not an error).
	ModelVersions(ctx context.Context, name string) ([]*virga.ModelVersion, error)
	// ModelVersion returns one version of a model; version 0 means its newest.
	// virga.ErrNotFound if there is none.
	ModelVersion(ctx context.Context, name string, version int64) (*virga.ModelVersion, error)
	// ModelAliases lists a model's aliases by alias, or with name "" every
	// model's, by name then alias.
	ModelAliases(ctx context.Context, name string) ([]virga.ModelAlias, error)
	// SetModelAlias points a.Alias of model a.Name at a.Version, creating the
	// alias or moving it in one statement. virga.ErrNotFound if that version
	// does not exist.
	SetModelAlias(ctx context.Context, a virga.ModelAlias) error
	// DeleteModelAlias removes an alias; virga.ErrNotFound if there is none.
	DeleteModelAlias(ctx context.Context, name, alias string) error
	// DeleteModelVersion removes a version and returns its FilesID and whether
	// another version still has the same FilesID (then the files must stay).
	// It fails with virga.ErrConflict, naming the aliases, while an alias
	// points at the version, and with virga.ErrNotFound if there is no such
	// version.
	DeleteModelVersion(ctx context.Context, name string, version int64) (filesID string, shared bool, err error)
}
