package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
)

// list runs a query and scans each row with scan.
func list[T any](ctx context.Context, s *Store, what string, scan func(pgx.Row) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := s.conn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// one runs a query for one row; no row is virga.ErrNotFound.
func one[T any](ctx context.Context, s *Store, what string, scan func(pgx.Row) (T, error), query string, args ...any) (T, error) {
	var v T
	err := s.conn(ctx, func(c *pgx.Conn) error {
		var err error
		v, err = scan(c.QueryRow(ctx, query, args...))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
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

func scanExperiment(r pgx.Row) (*virga.Experiment, error) {
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
		`SELECT id, `+experimentCols+` FROM experiments WHERE id = $1`, id)
}

// Experiments lists experiments, newest (highest ID) first.
func (s *Store) Experiments(ctx context.Context, f store.ExperimentFilter) ([]*virga.Experiment, error) {
	q := `SELECT id, ` + experimentCols + ` FROM experiments`
	var args []any
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		q += ` WHERE state = ANY($1::text[])`
		args = append(args, states)
	}
	q += ` ORDER BY id DESC` + limit(f.Limit)
	return list(ctx, s, "experiments", scanExperiment, q, args...)
}

func scanTrial(r pgx.Row) (*virga.Trial, error) {
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
func (s *Store) Trial(ctx context.Context, id int64) (*virga.Trial, error) {
	return one(ctx, s, fmt.Sprintf("trial %d", id), scanTrial,
		`SELECT id, `+trialCols+` FROM trials WHERE id = $1`, id)
}

// Trials lists an experiment's trials ordered by Seq.
func (s *Store) Trials(ctx context.Context, experimentID int64) ([]*virga.Trial, error) {
	return list(ctx, s, fmt.Sprintf("trials of experiment %d", experimentID), scanTrial,
		`SELECT id, `+trialCols+` FROM trials WHERE experiment_id = $1 ORDER BY seq`, experimentID)
}

func scanAttempt(r pgx.Row) (*virga.Attempt, error) {
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
func (s *Store) Attempt(ctx context.Context, id int64) (*virga.Attempt, error) {
	return one(ctx, s, fmt.Sprintf("attempt %d", id), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE id = $1`, id)
}

// Attempts lists a trial's attempts ordered by Number.
func (s *Store) Attempts(ctx context.Context, trialID int64) ([]*virga.Attempt, error) {
	return list(ctx, s, fmt.Sprintf("attempts of trial %d", trialID), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE trial_id = $1 ORDER BY number`, trialID)
}

// ExperimentAttempts lists the attempts of an experiment's trials, ordered
// by trial ID and Number.
func (s *Store) ExperimentAttempts(ctx context.Context, experimentID int64) ([]*virga.Attempt, error) {
	return list(ctx, s, fmt.Sprintf("attempts of experiment %d", experimentID), scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = $1)
		ORDER BY trial_id, number`, experimentID)
}

// LiveAttempts lists every attempt not in state EXITED, ordered by ID.
func (s *Store) LiveAttempts(ctx context.Context) ([]*virga.Attempt, error) {
	// The WHERE term matches the partial index attempts_live exactly.
	return list(ctx, s, "live attempts", scanAttempt,
		`SELECT id, `+attemptCols+` FROM attempts WHERE state <> 'EXITED' ORDER BY id`)
}

func scanMetric(r pgx.Row) (virga.Metric, error) {
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

// Metrics lists a trial's metrics ordered by step.
func (s *Store) Metrics(ctx context.Context, f store.MetricFilter) ([]virga.Metric, error) {
	return list(ctx, s, fmt.Sprintf("metrics of trial %d", f.TrialID), scanMetric,
		`SELECT trial_id, step, attempt_id, values_json, time FROM metrics
		WHERE trial_id = $1 AND step > $2 ORDER BY step`+limit(f.Limit), f.TrialID, f.AfterStep)
}

func scanCheckpoint(r pgx.Row) (virga.Checkpoint, error) {
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
func (s *Store) Checkpoints(ctx context.Context, trialID int64) ([]virga.Checkpoint, error) {
	return list(ctx, s, fmt.Sprintf("checkpoints of trial %d", trialID), scanCheckpoint,
		`SELECT trial_id, id, attempt_id, step, size, files, time FROM checkpoints
		WHERE trial_id = $1 ORDER BY time NULLS FIRST, pos`, trialID)
}

func scanEvent(r pgx.Row) (virga.Event, error) {
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
	q := `SELECT id, experiment_id, trial_id, attempt_id, kind, message, time FROM events WHERE id > $1`
	args := []any{f.AfterID}
	if f.ExperimentID != 0 {
		args = append(args, f.ExperimentID)
		q += fmt.Sprintf(` AND experiment_id = $%d`, len(args))
	}
	if f.TrialID != 0 {
		args = append(args, f.TrialID)
		q += fmt.Sprintf(` AND trial_id = $%d`, len(args))
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
	return s.conn(ctx, func(c *pgx.Conn) error {
		if t.ID == 0 {
			var id int64
			if err := c.QueryRow(ctx, `INSERT INTO tokens (name, hash, created_at) VALUES ($1, $2, $3) RETURNING id`,
				t.Name, t.Hash, created).Scan(&id); err != nil {
				return wrap(err, "storing token %q", t.Name)
			}
			t.ID = id
			return nil
		}
		ct, err := c.Exec(ctx, `UPDATE tokens SET name = $1, hash = $2, created_at = $3 WHERE id = $4`,
			t.Name, t.Hash, created, t.ID)
		if err != nil {
			return wrap(err, "storing token %d", t.ID)
		}
		if ct.RowsAffected() == 0 {
			return fmt.Errorf("storing token %d: %w", t.ID, virga.ErrNotFound)
		}
		return nil
	})
}

// TokenByHash finds a token by the hash of its secret.
func (s *Store) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return one(ctx, s, "token", func(r pgx.Row) (*store.Token, error) {
		var t store.Token
		var created *int64
		if err := r.Scan(&t.ID, &t.Name, &t.Hash, &created); err != nil {
			return nil, err
		}
		t.CreatedAt = column.DecTime(created)
		return &t, nil
	}, `SELECT id, name, hash, created_at FROM tokens WHERE hash = $1`, hash)
}
