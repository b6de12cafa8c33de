package sqlstore

import (
	"context"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
)

// Integer columns are scanned into int64 and converted, which every driver
// does for any integer column type.

func scanExperiment(r Row) (*virga.Experiment, error) {
	var e virga.Experiment
	var state, reason string
	var created, updated, ended *int64
	if err := r.Scan(&e.ID, &e.Name, &state, &e.Spec, &e.SpecFile, &e.SearcherState, &e.Message,
		&created, &updated, &ended, &reason); err != nil {
		return nil, err
	}
	e.State, e.Reason = virga.ExperimentState(state), virga.Reason(reason)
	e.Spec, e.SearcherState = column.DecBytes(e.Spec), column.DecBytes(e.SearcherState)
	e.CreatedAt, e.UpdatedAt, e.EndedAt = column.DecTime(created), column.DecTime(updated), column.DecTime(ended)
	return &e, nil
}

// Experiment returns one experiment with its spec and searcher state.
func (r *Reader) Experiment(ctx context.Context, id int64) (*virga.Experiment, error) {
	return one(ctx, r, fmt.Sprintf("experiment %d", id), scanExperiment,
		`SELECT id, `+ExperimentCols+` FROM experiments WHERE id = `+r.d.Param(1), id)
}

// Experiments lists experiments, newest (highest ID) first.
func (r *Reader) Experiments(ctx context.Context, f store.ExperimentFilter) ([]*virga.Experiment, error) {
	q := `SELECT id, ` + ExperimentCols + ` FROM experiments`
	var args []any
	if len(f.States) > 0 {
		q += ` WHERE state IN (` + r.d.params(1, len(f.States)) + `)`
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	q += ` ORDER BY id DESC` + limit(f.Limit)
	return list(ctx, r, "experiments", scanExperiment, q, args...)
}

func scanTrial(r Row) (*virga.Trial, error) {
	var t virga.Trial
	var state, hp, reason string
	var seq, attempts, restarts int64
	var created, updated, ended *int64
	var pred *string
	if err := r.Scan(&t.ID, &t.ExperimentID, &seq, &t.Request, &state, &hp, &attempts, &restarts,
		&t.Step, &t.Latest, &t.Best, &t.BestStep, &t.Checkpoint, &t.Message, &created, &updated, &ended,
		&t.Parent, &t.ParentCheckpoint, &t.ParentStep, &pred, &reason); err != nil {
		return nil, err
	}
	t.Seq, t.Attempts, t.Restarts = int(seq), int(attempts), int(restarts)
	t.State, t.Reason = virga.TrialState(state), virga.Reason(reason)
	t.CreatedAt, t.UpdatedAt, t.EndedAt = column.DecTime(created), column.DecTime(updated), column.DecTime(ended)
	var err error
	if t.HParams, err = column.DecHParams(hp); err != nil {
		return nil, fmt.Errorf("trial %d: %w", t.ID, err)
	}
	if t.Prediction, err = column.DecPrediction(pred); err != nil {
		return nil, fmt.Errorf("trial %d: %w", t.ID, err)
	}
	return &t, nil
}

// Trial returns one trial.
func (r *Reader) Trial(ctx context.Context, id int64) (*virga.Trial, error) {
	return one(ctx, r, fmt.Sprintf("trial %d", id), scanTrial,
		`SELECT id, `+TrialCols+` FROM trials WHERE id = `+r.d.Param(1), id)
}

// Trials lists an experiment's trials ordered by Seq.
func (r *Reader) Trials(ctx context.Context, experimentID int64) ([]*virga.Trial, error) {
	return list(ctx, r, fmt.Sprintf("trials of experiment %d", experimentID), scanTrial,
		`SELECT id, `+TrialCols+` FROM trials WHERE experiment_id = `+r.d.Param(1)+` ORDER BY seq`, experimentID)
}

func scanAttempt(r Row) (*virga.Attempt, error) {
	var a virga.Attempt
	var state, outcome string
	var number, pid int64
	var exit, created, started, ended *int64
	if err := r.Scan(&a.ID, &a.TrialID, &number, &state, &outcome, &a.Backend, &pid, &exit, &a.Signal,
		&a.Restored, &a.Dir, &a.Message, &created, &started, &ended, &a.Pool, &a.Cost, &a.LostCost); err != nil {
		return nil, err
	}
	a.Number, a.PID = int(number), int(pid)
	a.State, a.Outcome, a.ExitCode = virga.AttemptState(state), virga.Outcome(outcome), column.DecInt(exit)
	a.CreatedAt, a.StartedAt, a.EndedAt = column.DecTime(created), column.DecTime(started), column.DecTime(ended)
	return &a, nil
}

// Attempt returns one attempt.
func (r *Reader) Attempt(ctx context.Context, id int64) (*virga.Attempt, error) {
	return one(ctx, r, fmt.Sprintf("attempt %d", id), scanAttempt,
		`SELECT id, `+AttemptCols+` FROM attempts WHERE id = `+r.d.Param(1), id)
}

// Attempts lists a trial's attempts ordered by Number.
func (r *Reader) Attempts(ctx context.Context, trialID int64) ([]*virga.Attempt, error) {
	return list(ctx, r, fmt.Sprintf("attempts of trial %d", trialID), scanAttempt,
		`SELECT id, `+AttemptCols+` FROM attempts WHERE trial_id = `+r.d.Param(1)+` ORDER BY number`, trialID)
}

// ExperimentAttempts lists the attempts of an experiment's trials, ordered
// by trial ID and Number.
func (r *Reader) ExperimentAttempts(ctx context.Context, experimentID int64) ([]*virga.Attempt, error) {
	return list(ctx, r, fmt.Sprintf("attempts of experiment %d", experimentID), scanAttempt,
		`SELECT id, `+AttemptCols+` FROM attempts WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = `+r.d.Param(1)+`)
		ORDER BY trial_id, number`, experimentID)
}

// LiveAttempts lists every attempt not in state EXITED, ordered by ID.
func (r *Reader) LiveAttempts(ctx context.Context) ([]*virga.Attempt, error) {
	// The WHERE term matches the partial index attempts_live exactly.
	return list(ctx, r, "live attempts", scanAttempt,
		`SELECT id, `+AttemptCols+` FROM attempts WHERE state <> 'EXITED' ORDER BY id`)
}

func scanMetric(r Row) (virga.Metric, error) {
	var m virga.Metric
	var vals string
	var tm *int64
	if err := r.Scan(&m.TrialID, &m.Step, &m.AttemptID, &vals, &tm); err != nil {
		return m, err
	}
	m.Time = column.DecTime(tm)
	var err error
	if m.Values, err = column.DecValues(vals); err != nil {
		return m, fmt.Errorf("metric of trial %d step %d: %w", m.TrialID, m.Step, err)
	}
	return m, nil
}

// Metrics lists a trial's metrics ordered by step (the Dialect's query).
func (r *Reader) Metrics(ctx context.Context, f store.MetricFilter) ([]virga.Metric, error) {
	return list(ctx, r, fmt.Sprintf("metrics of trial %d", f.TrialID), scanMetric,
		r.d.Metrics+limit(f.Limit), f.TrialID, f.AfterStep)
}

func scanCheckpoint(r Row) (virga.Checkpoint, error) {
	var c virga.Checkpoint
	var files int64
	var tm *int64
	if err := r.Scan(&c.TrialID, &c.ID, &c.AttemptID, &c.Step, &c.Size, &files, &tm); err != nil {
		return c, err
	}
	c.Files, c.Time = int(files), column.DecTime(tm)
	return c, nil
}

// Checkpoints lists a trial's checkpoints, oldest first (by Time, then by
// the order they were inserted).
func (r *Reader) Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error) {
	return list(ctx, r, fmt.Sprintf("checkpoints of trial %d", trialID), scanCheckpoint,
		`SELECT trial_id, id, attempt_id, step, size, files, time FROM checkpoints
		WHERE trial_id = `+r.d.Param(1)+` ORDER BY `+r.d.CheckpointOrder, trialID)
}

func scanEvent(r Row) (virga.Event, error) {
	var e virga.Event
	var tm *int64
	var kind string
	if err := r.Scan(&e.ID, &e.ExperimentID, &e.TrialID, &e.AttemptID, &kind, &e.Message, &tm); err != nil {
		return e, err
	}
	e.Kind, e.Time = virga.EventKind(kind), column.DecTime(tm)
	return e, nil
}

// Events lists events ordered by ID.
func (r *Reader) Events(ctx context.Context, f store.EventFilter) ([]virga.Event, error) {
	q := `SELECT id, experiment_id, trial_id, attempt_id, kind, message, time FROM events WHERE id > ` + r.d.Param(1)
	args := []any{f.AfterID}
	if f.ExperimentID != 0 {
		args = append(args, f.ExperimentID)
		q += ` AND experiment_id = ` + r.d.Param(len(args))
	}
	if f.TrialID != 0 {
		args = append(args, f.TrialID)
		q += ` AND trial_id = ` + r.d.Param(len(args))
	}
	q += ` ORDER BY id` + limit(f.Limit)
	return list(ctx, r, "events", scanEvent, q, args...)
}

// TokenByHash finds a token by the hash of its secret.
func (r *Reader) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return one(ctx, r, "token", func(row Row) (*store.Token, error) {
		var t store.Token
		var created *int64
		if err := row.Scan(&t.ID, &t.Name, &t.Hash, &created); err != nil {
			return nil, err
		}
		t.CreatedAt = column.DecTime(created)
		return &t, nil
	}, `SELECT id, name, hash, created_at FROM tokens WHERE hash = `+r.d.Param(1), hash)
}
