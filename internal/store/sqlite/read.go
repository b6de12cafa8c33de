package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
)

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// list runs a query on the readers and scans each row with scan.
func list[T any](ctx context.Context, s *Store, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// one runs a query for one row; no row is virga.ErrNotFound.
func one[T any](ctx context.Context, s *Store, what string, scan func(scanner) (T, error), query string, args ...any) (T, error) {
	v, err := scan(s.r.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("%s: %w", what, virga.ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("reading %s: %w", what, err)
	}
	return v, nil
}

// limit returns a LIMIT clause for n (none for n <= 0).
func limit(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", n)
}

func scanExperiment(r scanner) (*virga.Experiment, error) {
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
func (s *Store) Experiment(ctx context.Context, id int64) (*virga.Experiment, error) {
	return one(ctx, s, fmt.Sprintf("experiment %d", id), scanExperiment,
		`SELECT id, `+experimentCols+` FROM experiments WHERE id = ?`, id)
}

// Experiments lists experiments, newest (highest ID) first.
func (s *Store) Experiments(ctx context.Context, f store.ExperimentFilter) ([]*virga.Experiment, error) {
	q := `SELECT id, ` + experimentCols + ` FROM experiments`
	var args []any
	if len(f.States) > 0 {
		q += ` WHERE state IN (?` + strings.Repeat(`, ?`, len(f.States)-1) + `)`
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	q += ` ORDER BY id DESC` + limit(f.Limit)
	return list(ctx, s, "experiments", scanExperiment, q, args...)
}

func scanTrial(r scanner) (*virga.Trial, error) {
	var t virga.Trial
	var state, hp, reason string
	var created, updated, ended *int64
	var pred *string
	if err := r.Scan(&t.ID, &t.ExperimentID, &t.Seq, &t.Request, &state, &hp, &t.Attempts, &t.Restarts,
		&t.Step, &t.Latest, &t.Best, &t.BestStep, &t.Checkpoint, &t.Message, &created, &updated, &ended,
		&t.Parent, &t.ParentCheckpoint, &t.ParentStep, &pred, &reason); err != nil {
		return nil, err
	}
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
func (s *Store) Trial(ctx context.Context, id int64) (*virga.Trial, error) {
	return one(ctx, s, fmt.Sprintf("trial %d", id), scanTrial,
		`SELECT id, `+trialCols+` FROM trials WHERE id = ?`, id)
}

// Trials lists an experiment's trials ordered by Seq.
func (s *Store) Trials(ctx context.Context, experimentID int64) ([]*virga.Trial, error) {
	return list(ctx, s, fmt.Sprintf("trials of experiment %d", experimentID), scanTrial,
		`SELECT id, `+trialCols+` FROM trials WHERE experiment_id = ? ORDER BY seq`, experimentID)
}

func scanAttempt(r scanner) (*virga.Attempt, error) {
	var a virga.Attempt
	var state, outcome string
	var exit, created, started, ended *int64
	if err := r.Scan(&a.ID, &a.TrialID, &a.Number, &state, &outcome, &a.Backend, &a.PID, &exit, &a.Signal,
		&a.Restored, &a.Dir, &a.Message, &created, &started, &ended, &a.Pool, &a.Cost, &a.LostCost); err != nil {
		return nil, err
	}
	a.State, a.Outcome, a.ExitCode = virga.AttemptState(state), virga.Outcome(outcome), column.DecInt(exit)
	a.CreatedAt, a.StartedAt, a.EndedAt = column.DecTime(created), column.DecTime(started), column.DecTime(ended)
	return &a, nil
}

// Attempt returns one attempt.
func (s *Store) Attempt(ctx context.Context, id int64) (*virga.Attempt, error) {
	return one(ctx, s, fmt.Sprintf("attempt %d", id), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE id = ?`, id)
}

// Attempts lists a trial's attempts ordered by Number.
func (s *Store) Attempts(ctx context.Context, trialID int64) ([]*virga.Attempt, error) {
	return list(ctx, s, fmt.Sprintf("attempts of trial %d", trialID), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE trial_id = ? ORDER BY number`, trialID)
}

// ExperimentAttempts lists the attempts of an experiment's trials, ordered
// by trial ID and Number.
func (s *Store) ExperimentAttempts(ctx context.Context, experimentID int64) ([]*virga.Attempt, error) {
	return list(ctx, s, fmt.Sprintf("attempts of experiment %d", experimentID), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = ?)
		ORDER BY trial_id, number`, experimentID)
}

// LiveAttempts lists every attempt not in state EXITED, ordered by ID.
func (s *Store) LiveAttempts(ctx context.Context) ([]*virga.Attempt, error) {
	// The WHERE term matches the partial index attempts_live exactly.
	return list(ctx, s, "live attempts", scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE state <> 'EXITED' ORDER BY id`)
}

func scanMetric(r scanner) (virga.Metric, error) {
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

// Metrics lists a trial's metrics ordered by step: those of metrics and
// those of metric_log not merged yet (see mergeRows), in one statement, so
// one snapshot. A logged row is newer than the merged row of its step, and
// of several logged rows of one step the one with the highest seq is the
// latest (SQLite takes the bare columns of a max() aggregate from the row
// holding the maximum). Each arm comes ordered by step and the two are
// merged, so a Limit stops early rather than sorting the trial's metrics.
func (s *Store) Metrics(ctx context.Context, f store.MetricFilter) ([]virga.Metric, error) {
	return list(ctx, s, fmt.Sprintf("metrics of trial %d", f.TrialID), scanMetric,
		`SELECT trial_id, step, attempt_id, values_json, time FROM metrics
		WHERE trial_id = ?1 AND step > ?2
			AND step NOT IN (SELECT step FROM metric_log WHERE trial_id = ?1 AND step > ?2)
		UNION ALL
		SELECT trial_id, step, attempt_id, values_json, time FROM (
			SELECT trial_id, step, attempt_id, values_json, time, max(seq) FROM metric_log
			WHERE trial_id = ?1 AND step > ?2 GROUP BY step)
		ORDER BY step`+limit(f.Limit), f.TrialID, f.AfterStep)
}

func scanCheckpoint(r scanner) (virga.Checkpoint, error) {
	var c virga.Checkpoint
	var tm *int64
	if err := r.Scan(&c.TrialID, &c.ID, &c.AttemptID, &c.Step, &c.Size, &c.Files, &tm); err != nil {
		return c, err
	}
	c.Time = column.DecTime(tm)
	return c, nil
}

// Checkpoints lists a trial's checkpoints, oldest first (by Time, then by
// the order they were inserted).
func (s *Store) Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error) {
	return list(ctx, s, fmt.Sprintf("checkpoints of trial %d", trialID), scanCheckpoint,
		`SELECT trial_id, id, attempt_id, step, size, files, time FROM checkpoints
		WHERE trial_id = ? ORDER BY time, rowid`, trialID)
}

func scanEvent(r scanner) (virga.Event, error) {
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
func (s *Store) Events(ctx context.Context, f store.EventFilter) ([]virga.Event, error) {
	q := `SELECT id, experiment_id, trial_id, attempt_id, kind, message, time FROM events WHERE id > ?`
	args := []any{f.AfterID}
	if f.ExperimentID != 0 {
		q += ` AND experiment_id = ?`
		args = append(args, f.ExperimentID)
	}
	if f.TrialID != 0 {
		q += ` AND trial_id = ?`
		args = append(args, f.TrialID)
	}
	q += ` ORDER BY id` + limit(f.Limit)
	return list(ctx, s, "events", scanEvent, q, args...)
}

// PutToken stores a token: it inserts it and sets its ID when ID is 0, and
// otherwise replaces the token of that ID (virga.ErrNotFound if none). A hash
// that another token already has is virga.ErrConflict.
func (s *Store) PutToken(ctx context.Context, t *store.Token) error {
	var enc column.Encoder
	created := enc.Time("created_at", t.CreatedAt)
	if enc.Err != nil {
		return fmt.Errorf("storing token %q: %w", t.Name, enc.Err)
	}
	if t.ID == 0 {
		res, err := s.w.ExecContext(ctx, `INSERT INTO tokens (name, hash, created_at) VALUES (?, ?, ?)`,
			t.Name, t.Hash, created)
		if err != nil {
			return wrap(err, "storing token %q", t.Name)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return wrap(err, "storing token %q", t.Name)
		}
		t.ID = id
		return nil
	}
	res, err := s.w.ExecContext(ctx, `UPDATE tokens SET name = ?, hash = ?, created_at = ? WHERE id = ?`,
		t.Name, t.Hash, created, t.ID)
	if err != nil {
		return wrap(err, "storing token %d", t.ID)
	}
	if n, err := res.RowsAffected(); err != nil {
		return wrap(err, "storing token %d", t.ID)
	} else if n == 0 {
		return fmt.Errorf("storing token %d: %w", t.ID, virga.ErrNotFound)
	}
	return nil
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return one(ctx, s, "token", func(r scanner) (*store.Token, error) {
		var t store.Token
		var created *int64
		if err := r.Scan(&t.ID, &t.Name, &t.Hash, &created); err != nil {
			return nil, err
		}
		t.CreatedAt = column.DecTime(created)
		return &t, nil
	}, `SELECT id, name, hash, created_at FROM tokens WHERE hash = ?`, hash)
}
