package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// Apply commits b in one transaction (see store.Batch). On failure nothing
// is stored and the IDs of rows it would have inserted are left at 0.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	var ids []*int64 // ID fields set by inserts, reset if the batch fails
	err := s.apply(ctx, b, &ids)
	if err != nil {
		for _, p := range ids {
			*p = 0
		}
		return fmt.Errorf("applying batch: %w", err)
	}
	return nil
}

func (s *Store) apply(ctx context.Context, b *store.Batch, ids *[]*int64) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback()
	w := writer{ctx: ctx, tx: tx, ids: ids}
	for _, e := range b.Experiments {
		if err := w.experiment(e); err != nil {
			return err
		}
	}
	for _, t := range b.Trials {
		if err := w.trial(t); err != nil {
			return err
		}
	}
	for _, a := range b.Attempts {
		if err := w.attempt(a); err != nil {
			return err
		}
	}
	if err := w.checkpoints(b.Checkpoints, b.DeleteCheckpoints); err != nil {
		return err
	}
	if err := w.metrics(b.Metrics); err != nil {
		return err
	}
	if err := w.events(b.Events); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// writer runs one batch's statements in its transaction.
type writer struct {
	ctx context.Context
	tx  *sql.Tx
	ids *[]*int64
}

// upsert inserts a row with insertArgs (setting *id) when *id is 0 and
// otherwise updates the row with that ID with updateArgs (the ID appended as
// the last parameter), failing with virga.ErrNotFound if there is none.
func (w *writer) upsert(what string, id *int64, insert, update string, insertArgs func() ([]any, error), updateArgs func() ([]any, error)) error {
	if *id == 0 {
		args, err := insertArgs()
		if err != nil {
			return err
		}
		res, err := w.tx.ExecContext(w.ctx, insert, args...)
		if err != nil {
			return wrap(err, "inserting %s", what)
		}
		n, err := res.LastInsertId()
		if err != nil {
			return wrap(err, "inserting %s", what)
		}
		*id = n
		*w.ids = append(*w.ids, id)
		return nil
	}
	args, err := updateArgs()
	if err != nil {
		return err
	}
	res, err := w.tx.ExecContext(w.ctx, update, append(args, *id)...)
	if err != nil {
		return wrap(err, "updating %s %d", what, *id)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return wrap(err, "updating %s %d", what, *id)
	}
	if n == 0 {
		return fmt.Errorf("updating %s %d: %w", what, *id, virga.ErrNotFound)
	}
	return nil
}

// The columns of the rows read back (see read.go) and inserted.
const (
	experimentCols = `name, state, spec, spec_file, searcher_state, message, created_at, updated_at, ended_at`
	trialCols      = `experiment_id, seq, request, state, hparams, attempts, restarts, step, latest, best,
	best_step, checkpoint, message, created_at, updated_at, ended_at`
	attemptCols = `trial_id, number, state, outcome, backend, pid, exit_code, signal, restored, dir, message,
	created_at, started_at, ended_at`
)

// The statements of the rows that are inserted and updated. An update leaves
// the columns fixed at insertion alone (see store.Batch).
const (
	insertExperiment = `INSERT INTO experiments (` + experimentCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateExperiment = `UPDATE experiments SET state = ?, searcher_state = ?, message = ?, updated_at = ?,
		ended_at = ? WHERE id = ?`
	insertTrial = `INSERT INTO trials (` + trialCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateTrial = `UPDATE trials SET state = ?, attempts = ?, restarts = ?, step = ?, latest = ?, best = ?,
		best_step = ?, checkpoint = ?, message = ?, updated_at = ?, ended_at = ? WHERE id = ?`
	insertAttempt = `INSERT INTO attempts (` + attemptCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateAttempt = `UPDATE attempts SET state = ?, outcome = ?, pid = ?, exit_code = ?, signal = ?,
		restored = ?, dir = ?, message = ?, started_at = ?, ended_at = ? WHERE id = ?`
	insertEvent = `INSERT INTO events (experiment_id, trial_id, attempt_id, kind, message, time)
		VALUES (?, ?, ?, ?, ?, ?)`
	updateEvent = `UPDATE events SET experiment_id = ?, trial_id = ?, attempt_id = ?, kind = ?, message = ?,
		time = ? WHERE id = ?`
)

func (w *writer) experiment(e *virga.Experiment) error {
	fail := func(err error) ([]any, error) { return nil, fmt.Errorf("experiment %q: %w", e.Name, err) }
	return w.upsert("experiment", &e.ID, insertExperiment, updateExperiment,
		func() ([]any, error) {
			var enc encoder
			args := []any{e.Name, string(e.State), e.Spec, e.SpecFile, e.SearcherState, e.Message,
				enc.time("created_at", e.CreatedAt), enc.time("updated_at", e.UpdatedAt), enc.time("ended_at", e.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc encoder
			args := []any{string(e.State), e.SearcherState, e.Message,
				enc.time("updated_at", e.UpdatedAt), enc.time("ended_at", e.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		})
}

func (w *writer) trial(t *virga.Trial) error {
	fail := func(err error) ([]any, error) {
		return nil, fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, err)
	}
	return w.upsert(fmt.Sprintf("trial (experiment %d, seq %d)", t.ExperimentID, t.Seq), &t.ID, insertTrial, updateTrial,
		func() ([]any, error) {
			var enc encoder
			args := []any{t.ExperimentID, t.Seq, t.Request, string(t.State), enc.hparams(t.HParams),
				t.Attempts, t.Restarts, t.Step, float(t.Latest), float(t.Best), t.BestStep, t.Checkpoint, t.Message,
				enc.time("created_at", t.CreatedAt), enc.time("updated_at", t.UpdatedAt), enc.time("ended_at", t.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc encoder
			args := []any{string(t.State), t.Attempts, t.Restarts, t.Step, float(t.Latest), float(t.Best),
				t.BestStep, t.Checkpoint, t.Message, enc.time("updated_at", t.UpdatedAt), enc.time("ended_at", t.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		})
}

func (w *writer) attempt(a *virga.Attempt) error {
	fail := func(err error) ([]any, error) {
		return nil, fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, err)
	}
	return w.upsert(fmt.Sprintf("attempt (trial %d, number %d)", a.TrialID, a.Number), &a.ID, insertAttempt, updateAttempt,
		func() ([]any, error) {
			var enc encoder
			args := []any{a.TrialID, a.Number, string(a.State), string(a.Outcome), a.Backend, a.PID, intPtr(a.ExitCode),
				a.Signal, a.Restored, a.Dir, a.Message,
				enc.time("created_at", a.CreatedAt), enc.time("started_at", a.StartedAt), enc.time("ended_at", a.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc encoder
			args := []any{string(a.State), string(a.Outcome), a.PID, intPtr(a.ExitCode), a.Signal, a.Restored,
				a.Dir, a.Message, enc.time("started_at", a.StartedAt), enc.time("ended_at", a.EndedAt)}
			if enc.err != nil {
				return fail(enc.err)
			}
			return args, nil
		})
}

func (w *writer) checkpoints(add []virga.Checkpoint, del []store.CheckpointRef) error {
	if len(add) > 0 {
		st, err := w.tx.PrepareContext(w.ctx, `INSERT INTO checkpoints
			(trial_id, id, attempt_id, step, size, files, time) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (trial_id, id) DO NOTHING`)
		if err != nil {
			return fmt.Errorf("preparing checkpoint insert: %w", err)
		}
		defer st.Close()
		for _, c := range add {
			var enc encoder
			tm := enc.time("time", c.Time)
			if enc.err != nil {
				return fmt.Errorf("checkpoint %s of trial %d: %w", c.ID, c.TrialID, enc.err)
			}
			if _, err := st.ExecContext(w.ctx, c.TrialID, c.ID, c.AttemptID, c.Step, c.Size, c.Files, tm); err != nil {
				return wrap(err, "inserting checkpoint %s of trial %d", c.ID, c.TrialID)
			}
		}
	}
	for _, r := range del {
		if _, err := w.tx.ExecContext(w.ctx, `DELETE FROM checkpoints WHERE trial_id = ? AND id = ?`, r.TrialID, r.ID); err != nil {
			return wrap(err, "deleting checkpoint %s of trial %d", r.ID, r.TrialID)
		}
	}
	return nil
}

func (w *writer) metrics(ms []virga.Metric) error {
	if len(ms) == 0 {
		return nil
	}
	st, err := w.tx.PrepareContext(w.ctx, `INSERT INTO metrics (trial_id, step, attempt_id, values_json, time)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (trial_id, step) DO UPDATE SET
			attempt_id = excluded.attempt_id, values_json = excluded.values_json, time = excluded.time`)
	if err != nil {
		return fmt.Errorf("preparing metric insert: %w", err)
	}
	defer st.Close()
	for _, m := range ms {
		var enc encoder
		args := []any{m.TrialID, m.Step, m.AttemptID, enc.values(m.Values), enc.time("time", m.Time)}
		if enc.err != nil {
			return fmt.Errorf("metric of trial %d step %d: %w", m.TrialID, m.Step, enc.err)
		}
		if _, err := st.ExecContext(w.ctx, args...); err != nil {
			return wrap(err, "storing metric of trial %d step %d", m.TrialID, m.Step)
		}
	}
	return nil
}

func (w *writer) events(es []*virga.Event) error {
	for _, e := range es {
		args := func() ([]any, error) {
			var enc encoder
			args := []any{e.ExperimentID, e.TrialID, e.AttemptID, e.Kind, e.Message, enc.time("time", e.Time)}
			if enc.err != nil {
				return nil, fmt.Errorf("event %s: %w", e.Kind, enc.err)
			}
			return args, nil
		}
		if err := w.upsert("event "+e.Kind, &e.ID, insertEvent, updateEvent, args, args); err != nil {
			return err
		}
	}
	return nil
}
