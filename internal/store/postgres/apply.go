package postgres

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// Apply commits b in one transaction (see store.Batch). On failure nothing
// is stored and the IDs of rows it would have inserted are left at 0.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if b == nil || b.Empty() {
		return nil
	}
	q := queue{b: &pgx.Batch{}}
	if err := q.build(b); err != nil {
		return fmt.Errorf("applying batch: %w", err)
	}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		return tx.SendBatch(ctx, q.b).Close()
	})
	if err != nil {
		for _, p := range q.ids {
			*p = 0
		}
		return fmt.Errorf("applying batch: %w", err)
	}
	return nil
}

// queue builds the pgx.Batch of one store.Batch, in the documented order.
type queue struct {
	b   *pgx.Batch
	ids []*int64 // ID fields set by inserts, reset if the batch fails
}

func (q *queue) build(b *store.Batch) error {
	// The events of a new experiment follow its insert, which they take
	// its ID from (the batch is one pipeline: the ID is not known here).
	evs := make(map[*virga.Experiment][]*virga.Event, len(b.NewExperimentEvents))
	for _, ne := range b.NewExperimentEvents {
		if ne.Experiment.ID != 0 || ne.Event.ID != 0 || ne.Event.ExperimentID != 0 {
			if ne.Event.ID == 0 && ne.Event.ExperimentID == 0 {
				ne.Event.ExperimentID = ne.Experiment.ID
			}
			evs[nil] = append(evs[nil], ne.Event)
			continue
		}
		if !slices.Contains(b.Experiments, ne.Experiment) {
			return fmt.Errorf("event %s: its experiment %q is neither stored nor inserted by the batch", ne.Event.Kind, ne.Experiment.Name)
		}
		evs[ne.Experiment] = append(evs[ne.Experiment], ne.Event)
	}
	for _, e := range b.Experiments {
		isNew := e.ID == 0
		if err := q.experiment(e); err != nil {
			return err
		}
		if !isNew {
			continue
		}
		for _, ev := range evs[e] {
			if err := q.newExperimentEvent(ev); err != nil {
				return err
			}
		}
	}
	for _, ev := range evs[nil] {
		if err := q.event(ev); err != nil {
			return err
		}
	}
	for _, t := range b.Trials {
		if err := q.trial(t); err != nil {
			return err
		}
	}
	for _, na := range b.NewAttempts {
		if err := q.newAttempt(na); err != nil {
			return err
		}
	}
	for _, a := range b.Attempts {
		if err := q.attempt(a); err != nil {
			return err
		}
	}
	if err := q.checkpoints(b.Checkpoints, b.DeleteCheckpoints); err != nil {
		return err
	}
	if err := q.metrics(b.Metrics); err != nil {
		return err
	}
	for _, e := range b.Events {
		if err := q.event(e); err != nil {
			return err
		}
	}
	return nil
}

// insert queues an insert whose RETURNING id sets *id.
func (q *queue) insert(what string, id *int64, sql string, args ...any) {
	q.b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(id); err != nil {
			return wrap(err, "inserting %s", what)
		}
		q.ids = append(q.ids, id)
		return nil
	}
}

// update queues an update of the row with ID id, failing with
// virga.ErrNotFound if there is none.
func (q *queue) update(what string, id int64, sql string, args ...any) {
	q.b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		ct, err := br.Exec()
		if err != nil {
			return wrap(err, "updating %s %d", what, id)
		}
		if ct.RowsAffected() == 0 {
			return fmt.Errorf("updating %s %d: %w", what, id, virga.ErrNotFound)
		}
		return nil
	}
}

// exec queues a statement whose only result is success or failure.
func (q *queue) exec(what string, sql string, args ...any) {
	q.b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return wrap(err, "%s", what)
		}
		return nil
	}
}

// An update leaves the columns fixed at insertion alone (see store.Batch).

func (q *queue) experiment(e *virga.Experiment) error {
	var enc column.Encoder
	if e.ID == 0 {
		args := []any{e.Name, string(e.State), e.Spec, e.SpecFile, e.SearcherState, e.Message,
			enc.Time("created_at", e.CreatedAt), enc.Time("updated_at", e.UpdatedAt), enc.Time("ended_at", e.EndedAt),
			string(e.Reason)}
		if enc.Err != nil {
			return fmt.Errorf("experiment %q: %w", e.Name, enc.Err)
		}
		q.insert("experiment", &e.ID, `INSERT INTO experiments (`+sqlstore.ExperimentCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id`,
			args...)
		return nil
	}
	args := []any{string(e.State), e.SearcherState, e.Message,
		enc.Time("updated_at", e.UpdatedAt), enc.Time("ended_at", e.EndedAt), string(e.Reason), e.ID}
	if enc.Err != nil {
		return fmt.Errorf("experiment %q: %w", e.Name, enc.Err)
	}
	q.update("experiment", e.ID, `UPDATE experiments SET state = $1, searcher_state = $2, message = $3,
		updated_at = $4, ended_at = $5, reason = $6 WHERE id = $7`, args...)
	return nil
}

func (q *queue) trial(t *virga.Trial) error {
	var enc column.Encoder
	what := fmt.Sprintf("trial (experiment %d, seq %d)", t.ExperimentID, t.Seq)
	if t.ID == 0 {
		args := []any{t.ExperimentID, t.Seq, t.Request, string(t.State), enc.HParams(t.HParams),
			t.Attempts, t.Restarts, t.Step, column.Float(t.Latest), column.Float(t.Best), t.BestStep, t.Checkpoint, t.Message,
			enc.Time("created_at", t.CreatedAt), enc.Time("updated_at", t.UpdatedAt), enc.Time("ended_at", t.EndedAt),
			t.Parent, t.ParentCheckpoint, t.ParentStep, enc.Prediction(t.Prediction), string(t.Reason)}
		if enc.Err != nil {
			return fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, enc.Err)
		}
		q.insert(what, &t.ID, `INSERT INTO trials (`+sqlstore.TrialCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21) RETURNING id`,
			args...)
		return nil
	}
	args := []any{string(t.State), t.Attempts, t.Restarts, t.Step, column.Float(t.Latest), column.Float(t.Best),
		t.BestStep, t.Checkpoint, t.Message, enc.Time("updated_at", t.UpdatedAt), enc.Time("ended_at", t.EndedAt),
		enc.Prediction(t.Prediction), string(t.Reason), t.ID}
	if enc.Err != nil {
		return fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, enc.Err)
	}
	q.update(what, t.ID, `UPDATE trials SET state = $1, attempts = $2, restarts = $3, step = $4, latest = $5,
		best = $6, best_step = $7, checkpoint = $8, message = $9, updated_at = $10, ended_at = $11,
		prediction = $12, reason = $13 WHERE id = $14`, args...)
	return nil
}

// newAttempt queues the insert of an attempt of a trial inserted earlier in
// the same pipeline: its ID is not known when the statement is queued, so the
// trial is found by its (experiment, seq) key.
func (q *queue) newAttempt(na store.NewAttempt) error {
	a, t := na.Attempt, na.Trial
	if a.ID != 0 || a.TrialID != 0 {
		return q.attempt(a)
	}
	var enc column.Encoder
	args := []any{t.ExperimentID, t.Seq, a.Number, string(a.State), string(a.Outcome), a.Backend, a.PID, column.IntPtr(a.ExitCode),
		a.Signal, a.Restored, a.Dir, a.Message,
		enc.Time("created_at", a.CreatedAt), enc.Time("started_at", a.StartedAt), enc.Time("ended_at", a.EndedAt),
		a.Pool, enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost)}
	if enc.Err != nil {
		return fmt.Errorf("attempt %d of trial %d of experiment %d: %w", a.Number, t.Seq, t.ExperimentID, enc.Err)
	}
	what := fmt.Sprintf("attempt (trial %d of experiment %d, number %d)", t.Seq, t.ExperimentID, a.Number)
	q.b.Queue(`INSERT INTO attempts (`+sqlstore.AttemptCols+`)
		VALUES ((SELECT id FROM trials WHERE experiment_id = $1 AND seq = $2), $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
			$16, $17, $18)
		RETURNING id, trial_id`, args...).Fn = func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&a.ID, &a.TrialID); err != nil {
			return wrap(err, "inserting %s", what)
		}
		q.ids = append(q.ids, &a.ID, &a.TrialID)
		return nil
	}
	return nil
}

func (q *queue) attempt(a *virga.Attempt) error {
	var enc column.Encoder
	what := fmt.Sprintf("attempt (trial %d, number %d)", a.TrialID, a.Number)
	if a.ID == 0 {
		args := []any{a.TrialID, a.Number, string(a.State), string(a.Outcome), a.Backend, a.PID, column.IntPtr(a.ExitCode),
			a.Signal, a.Restored, a.Dir, a.Message,
			enc.Time("created_at", a.CreatedAt), enc.Time("started_at", a.StartedAt), enc.Time("ended_at", a.EndedAt),
			a.Pool, enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost)}
		if enc.Err != nil {
			return fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, enc.Err)
		}
		q.insert(what, &a.ID, `INSERT INTO attempts (`+sqlstore.AttemptCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) RETURNING id`,
			args...)
		return nil
	}
	args := []any{string(a.State), string(a.Outcome), a.PID, column.IntPtr(a.ExitCode), a.Signal, a.Restored,
		a.Dir, a.Message, enc.Time("started_at", a.StartedAt), enc.Time("ended_at", a.EndedAt),
		a.Pool, enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost), a.ID}
	if enc.Err != nil {
		return fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, enc.Err)
	}
	q.update(what, a.ID, `UPDATE attempts SET state = $1, outcome = $2, pid = $3, exit_code = $4, signal = $5,
		restored = $6, dir = $7, message = $8, started_at = $9, ended_at = $10, pool = $11, cost = $12,
		lost_cost = $13 WHERE id = $14`, args...)
	return nil
}

func (q *queue) checkpoints(add []virga.Checkpoint, del []store.CheckpointRef) error {
	for _, c := range add {
		var enc column.Encoder
		tm := enc.Time("time", c.Time)
		if enc.Err != nil {
			return fmt.Errorf("checkpoint %s of trial %d: %w", c.ID, c.TrialID, enc.Err)
		}
		q.exec(fmt.Sprintf("inserting checkpoint %s of trial %d", c.ID, c.TrialID),
			`INSERT INTO checkpoints (trial_id, id, attempt_id, step, size, files, time)
				VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (trial_id, id) DO NOTHING`,
			c.TrialID, c.ID, c.AttemptID, c.Step, c.Size, c.Files, tm)
	}
	for _, r := range del {
		q.exec(fmt.Sprintf("deleting checkpoint %s of trial %d", r.ID, r.TrialID),
			`DELETE FROM checkpoints WHERE trial_id = $1 AND id = $2`, r.TrialID, r.ID)
	}
	return nil
}

// metrics queues one multi-row upsert of all the metrics. PostgreSQL refuses
// to update a row twice in one statement, so of several metrics with the same
// (trial, step) only the last is sent, as if they were applied in order.
func (q *queue) metrics(ms []virga.Metric) error {
	if len(ms) == 0 {
		return nil
	}
	type key struct{ trial, step int64 }
	last := make(map[key]int, len(ms))
	for i, m := range ms {
		last[key{m.TrialID, m.Step}] = i
	}
	n := len(last)
	trials, steps, attempts := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	values, times := make([]string, 0, n), make([]*int64, 0, n)
	for i, m := range ms {
		if last[key{m.TrialID, m.Step}] != i {
			continue
		}
		var enc column.Encoder
		v, tm := enc.Values(m.Values), enc.Time("time", m.Time)
		if enc.Err != nil {
			return fmt.Errorf("metric of trial %d step %d: %w", m.TrialID, m.Step, enc.Err)
		}
		trials, steps, attempts, values = append(trials, m.TrialID), append(steps, m.Step), append(attempts, m.AttemptID), append(values, v)
		if tm == nil {
			times = append(times, nil)
		} else {
			ns := tm.(int64)
			times = append(times, &ns)
		}
	}
	q.exec(fmt.Sprintf("storing %d metrics", n),
		`INSERT INTO metrics (trial_id, step, attempt_id, values_json, time)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bigint[])
		ON CONFLICT (trial_id, step) DO UPDATE SET
			attempt_id = excluded.attempt_id, values_json = excluded.values_json, time = excluded.time`,
		trials, steps, attempts, values, times)
	return nil
}

// newExperimentEvent queues the insert of an event of the experiment the
// statement before inserted (the last ID its sequence gave in this
// transaction).
func (q *queue) newExperimentEvent(e *virga.Event) error {
	var enc column.Encoder
	args := []any{e.TrialID, e.AttemptID, string(e.Kind), e.Message, enc.Time("time", e.Time)}
	if enc.Err != nil {
		return fmt.Errorf("event %s: %w", e.Kind, enc.Err)
	}
	q.b.Queue(`INSERT INTO events (experiment_id, trial_id, attempt_id, kind, message, time)
		VALUES (currval(pg_get_serial_sequence('experiments', 'id')), $1, $2, $3, $4, $5) RETURNING id, experiment_id`, args...).Fn = func(br pgx.BatchResults) error {
		if err := br.QueryRow().Scan(&e.ID, &e.ExperimentID); err != nil {
			return wrap(err, "inserting event %s", e.Kind)
		}
		q.ids = append(q.ids, &e.ID, &e.ExperimentID)
		return nil
	}
	return nil
}

func (q *queue) event(e *virga.Event) error {
	var enc column.Encoder
	args := []any{e.ExperimentID, e.TrialID, e.AttemptID, string(e.Kind), e.Message, enc.Time("time", e.Time)}
	if enc.Err != nil {
		return fmt.Errorf("event %s: %w", e.Kind, enc.Err)
	}
	if e.ID == 0 {
		q.insert("event "+string(e.Kind), &e.ID, `INSERT INTO events (experiment_id, trial_id, attempt_id, kind, message, time)
			VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, args...)
		return nil
	}
	q.update("event "+string(e.Kind), e.ID, `UPDATE events SET experiment_id = $1, trial_id = $2, attempt_id = $3,
		kind = $4, message = $5, time = $6 WHERE id = $7`, append(args, e.ID)...)
	return nil
}
