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
	"github.com/virga-ml/virga/internal/store/sqlstore"
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
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer tx.Rollback()
	w := writer{ctx: ctx, tx: tx, ids: ids, st: s.st}
	for _, e := range b.Experiments {
		if err := w.experiment(e); err != nil {
			return err
		}
	}
	for _, ne := range b.NewExperimentEvents {
		if ne.Event.ID == 0 && ne.Event.ExperimentID == 0 {
			ne.Event.ExperimentID = ne.Experiment.ID
			*ids = append(*ids, &ne.Event.ExperimentID)
		}
		if err := w.events([]*virga.Event{ne.Event}); err != nil {
			return err
		}
	}
	for _, t := range b.Trials {
		if err := w.trial(t); err != nil {
			return err
		}
	}
	for _, na := range b.NewAttempts {
		if na.Attempt.ID == 0 && na.Attempt.TrialID == 0 {
			na.Attempt.TrialID = na.Trial.ID
			*ids = append(*ids, &na.Attempt.TrialID)
		}
		if err := w.attempt(na.Attempt); err != nil {
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
	logRows := s.logRows + len(b.Metrics)
	if logRows >= mergeRows {
		if err := w.mergeLog(); err != nil {
			return err
		}
		logRows = 0
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	s.logRows = logRows
	return nil
}

// mergeRows is how many rows metric_log holds before an Apply merges it into
// metrics. A commit of one metric per trial for many trials appends to one
// or two pages of the log rather than dirtying one leaf page of metrics per
// trial (each written to the WAL whole); the merge then writes each trial's
// pages once for many commits. More rows make merges rarer but reads, which
// scan the log, slower (4096 rows are ~250 KB).
const mergeRows = 4096

// mergeLog moves metric_log into metrics in w's transaction.
func (w *writer) mergeLog() error {
	if _, err := w.exec(w.st.mergeLog); err != nil {
		return wrap(err, "merging metric_log into metrics")
	}
	if _, err := w.exec(w.st.clearLog); err != nil {
		return wrap(err, "emptying metric_log")
	}
	return nil
}

// merge merges metric_log into metrics in a transaction of its own.
func (s *Store) merge(ctx context.Context) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("merging metric_log: beginning transaction: %w", err)
	}
	defer tx.Rollback()
	w := writer{ctx: ctx, tx: tx, st: s.st}
	if err := w.mergeLog(); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("merging metric_log: committing: %w", err)
	}
	s.logRows = 0
	return nil
}

// writer runs one batch's statements in its transaction.
type writer struct {
	ctx context.Context
	tx  *sql.Tx
	ids *[]*int64
	st  *stmts
}

// exec runs a statement prepared once on the writer connection (see stmts)
// in the batch's transaction, so SQLite does not parse it again.
func (w *writer) exec(st *sql.Stmt, args ...any) (sql.Result, error) {
	return w.tx.StmtContext(w.ctx, st).ExecContext(w.ctx, args...)
}

// upsert inserts a row with insertArgs (setting *id) when *id is 0 and
// otherwise updates the row with that ID with updateArgs (the ID appended as
// the last parameter), failing with virga.ErrNotFound if there is none.
func (w *writer) upsert(what string, id *int64, insert, update *sql.Stmt, insertArgs func() ([]any, error), updateArgs func() ([]any, error)) error {
	if *id == 0 {
		args, err := insertArgs()
		if err != nil {
			return err
		}
		res, err := w.exec(insert, args...)
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
	res, err := w.exec(update, append(args, *id)...)
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

// The statements of the rows that are inserted and updated. An update leaves
// the columns fixed at insertion alone (see store.Batch).
const (
	insertExperiment = `INSERT INTO experiments (` + sqlstore.ExperimentCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateExperiment = `UPDATE experiments SET state = ?, searcher_state = ?, message = ?, updated_at = ?,
		ended_at = ?, reason = ? WHERE id = ?`
	insertTrial = `INSERT INTO trials (` + sqlstore.TrialCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateTrial = `UPDATE trials SET state = ?, attempts = ?, restarts = ?, step = ?, latest = ?, best = ?,
		best_step = ?, checkpoint = ?, message = ?, updated_at = ?, ended_at = ?, prediction = ?, reason = ? WHERE id = ?`
	insertAttempt = `INSERT INTO attempts (` + sqlstore.AttemptCols + `)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	updateAttempt = `UPDATE attempts SET state = ?, outcome = ?, pid = ?, exit_code = ?, signal = ?,
		restored = ?, dir = ?, message = ?, started_at = ?, ended_at = ?, pool = ?, cost = ?, lost_cost = ? WHERE id = ?`
	insertEvent = `INSERT INTO events (experiment_id, trial_id, attempt_id, kind, message, time)
		VALUES (?, ?, ?, ?, ?, ?)`
	updateEvent = `UPDATE events SET experiment_id = ?, trial_id = ?, attempt_id = ?, kind = ?, message = ?,
		time = ? WHERE id = ?`
	insertCheckpoint = `INSERT INTO checkpoints (trial_id, id, attempt_id, step, size, files, time)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (trial_id, id) DO NOTHING`
	deleteCheckpoint = `DELETE FROM checkpoints WHERE trial_id = ? AND id = ?`
)

// metricCols is the number of parameters of one metric row; maxMetricRows
// the most rows of one metric statement, 2^(len(stmts.logMetrics)-1),
// far below SQLite's limit of 32766 parameters.
const (
	metricCols    = 5
	maxMetricRows = 64
)

// logMetricsSQL returns the insert of n metric rows into metric_log.
func logMetricsSQL(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO metric_log (trial_id, step, attempt_id, values_json, time) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?)")
	}
	return b.String()
}

// The merge of metric_log into metrics (see mergeRows): every logged row is
// upserted in arrival order, so that of several rows of one (trial_id, step)
// the last one stays, then the log is emptied. ("WHERE true" keeps SQLite
// from reading ON CONFLICT as a join constraint.)
const (
	mergeLog = `INSERT INTO metrics (trial_id, step, attempt_id, values_json, time)
		SELECT trial_id, step, attempt_id, values_json, time FROM metric_log WHERE true ORDER BY seq
		ON CONFLICT (trial_id, step) DO UPDATE SET
		attempt_id = excluded.attempt_id, values_json = excluded.values_json, time = excluded.time`
	clearLog = `DELETE FROM metric_log`
)

// stmts are the writer's statements, prepared once when the store opens.
// They are prepared on the writer *sql.DB, whose only connection is the
// one every transaction runs on, so tx.StmtContext finds each one already
// prepared there and SQLite does not parse it again. (Were that connection
// ever replaced, database/sql would prepare them again on the new one.)
type stmts struct {
	insertExperiment, updateExperiment *sql.Stmt
	insertTrial, updateTrial           *sql.Stmt
	insertAttempt, updateAttempt       *sql.Stmt
	insertEvent, updateEvent           *sql.Stmt
	insertCheckpoint, deleteCheckpoint *sql.Stmt
	// logMetrics[k] appends 2^k metric rows to metric_log, up to maxMetricRows.
	logMetrics         [7]*sql.Stmt
	mergeLog, clearLog *sql.Stmt
	all                []*sql.Stmt
}

// prepareStmts prepares the writer's statements on db.
func prepareStmts(ctx context.Context, db *sql.DB) (*stmts, error) {
	st := &stmts{}
	prep := func(p **sql.Stmt, query string) error {
		s, err := db.PrepareContext(ctx, query)
		if err != nil {
			return fmt.Errorf("preparing %.40q...: %w", query, err)
		}
		*p = s
		st.all = append(st.all, s)
		return nil
	}
	for _, q := range []struct {
		p     **sql.Stmt
		query string
	}{
		{&st.insertExperiment, insertExperiment}, {&st.updateExperiment, updateExperiment},
		{&st.insertTrial, insertTrial}, {&st.updateTrial, updateTrial},
		{&st.insertAttempt, insertAttempt}, {&st.updateAttempt, updateAttempt},
		{&st.insertEvent, insertEvent}, {&st.updateEvent, updateEvent},
		{&st.insertCheckpoint, insertCheckpoint}, {&st.deleteCheckpoint, deleteCheckpoint},
		{&st.mergeLog, mergeLog}, {&st.clearLog, clearLog},
	} {
		if err := prep(q.p, q.query); err != nil {
			st.close()
			return nil, err
		}
	}
	for k := range st.logMetrics {
		if err := prep(&st.logMetrics[k], logMetricsSQL(1<<k)); err != nil {
			st.close()
			return nil, err
		}
	}
	return st, nil
}

// close closes the statements.
func (st *stmts) close() error {
	var errs []error
	for _, s := range st.all {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

func (w *writer) experiment(e *virga.Experiment) error {
	fail := func(err error) ([]any, error) { return nil, fmt.Errorf("experiment %q: %w", e.Name, err) }
	return w.upsert("experiment", &e.ID, w.st.insertExperiment, w.st.updateExperiment,
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{e.Name, string(e.State), e.Spec, e.SpecFile, e.SearcherState, e.Message,
				enc.Time("created_at", e.CreatedAt), enc.Time("updated_at", e.UpdatedAt), enc.Time("ended_at", e.EndedAt),
				string(e.Reason)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{string(e.State), e.SearcherState, e.Message,
				enc.Time("updated_at", e.UpdatedAt), enc.Time("ended_at", e.EndedAt), string(e.Reason)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		})
}

func (w *writer) trial(t *virga.Trial) error {
	fail := func(err error) ([]any, error) {
		return nil, fmt.Errorf("trial %d of experiment %d: %w", t.Seq, t.ExperimentID, err)
	}
	return w.upsert(fmt.Sprintf("trial (experiment %d, seq %d)", t.ExperimentID, t.Seq), &t.ID, w.st.insertTrial, w.st.updateTrial,
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{t.ExperimentID, t.Seq, t.Request, string(t.State), enc.HParams(t.HParams),
				t.Attempts, t.Restarts, t.Step, column.Float(t.Latest), column.Float(t.Best), t.BestStep, t.Checkpoint, t.Message,
				enc.Time("created_at", t.CreatedAt), enc.Time("updated_at", t.UpdatedAt), enc.Time("ended_at", t.EndedAt),
				t.Parent, t.ParentCheckpoint, t.ParentStep, enc.Prediction(t.Prediction), string(t.Reason)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{string(t.State), t.Attempts, t.Restarts, t.Step, column.Float(t.Latest), column.Float(t.Best),
				t.BestStep, t.Checkpoint, t.Message, enc.Time("updated_at", t.UpdatedAt), enc.Time("ended_at", t.EndedAt),
				enc.Prediction(t.Prediction), string(t.Reason)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		})
}

func (w *writer) attempt(a *virga.Attempt) error {
	fail := func(err error) ([]any, error) {
		return nil, fmt.Errorf("attempt %d of trial %d: %w", a.Number, a.TrialID, err)
	}
	return w.upsert(fmt.Sprintf("attempt (trial %d, number %d)", a.TrialID, a.Number), &a.ID, w.st.insertAttempt, w.st.updateAttempt,
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{a.TrialID, a.Number, string(a.State), string(a.Outcome), a.Backend, a.PID, column.IntPtr(a.ExitCode),
				a.Signal, a.Restored, a.Dir, a.Message,
				enc.Time("created_at", a.CreatedAt), enc.Time("started_at", a.StartedAt), enc.Time("ended_at", a.EndedAt),
				a.Pool, enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		},
		func() ([]any, error) {
			var enc column.Encoder
			args := []any{string(a.State), string(a.Outcome), a.PID, column.IntPtr(a.ExitCode), a.Signal, a.Restored,
				a.Dir, a.Message, enc.Time("started_at", a.StartedAt), enc.Time("ended_at", a.EndedAt),
				a.Pool, enc.Dollars("cost", a.Cost), enc.Dollars("lost_cost", a.LostCost)}
			if enc.Err != nil {
				return fail(enc.Err)
			}
			return args, nil
		})
}

func (w *writer) checkpoints(add []virga.Checkpoint, del []store.CheckpointRef) error {
	for _, c := range add {
		var enc column.Encoder
		tm := enc.Time("time", c.Time)
		if enc.Err != nil {
			return fmt.Errorf("checkpoint %s of trial %d: %w", c.ID, c.TrialID, enc.Err)
		}
		if _, err := w.exec(w.st.insertCheckpoint, c.TrialID, c.ID, c.AttemptID, c.Step, c.Size, c.Files, tm); err != nil {
			return wrap(err, "inserting checkpoint %s of trial %d", c.ID, c.TrialID)
		}
	}
	for _, r := range del {
		if _, err := w.exec(w.st.deleteCheckpoint, r.TrialID, r.ID); err != nil {
			return wrap(err, "deleting checkpoint %s of trial %d", r.ID, r.TrialID)
		}
	}
	return nil
}

// metrics appends ms to metric_log with multi-row statements: the largest
// prepared chunk that fits, then smaller ones (see stmts.logMetrics), in
// order, so that of several metrics with the same (trial, step) the last one
// has the highest seq and stays.
func (w *writer) metrics(ms []virga.Metric) error {
	args := make([]any, 0, metricCols*min(len(ms), maxMetricRows))
	for len(ms) > 0 {
		k := len(w.st.logMetrics) - 1
		for 1<<k > len(ms) {
			k--
		}
		n := 1 << k
		args = args[:0]
		for _, m := range ms[:n] {
			var enc column.Encoder
			args = append(args, m.TrialID, m.Step, m.AttemptID, enc.Values(m.Values), enc.Time("time", m.Time))
			if enc.Err != nil {
				return fmt.Errorf("metric of trial %d step %d: %w", m.TrialID, m.Step, enc.Err)
			}
		}
		if _, err := w.exec(w.st.logMetrics[k], args...); err != nil {
			if n == 1 {
				return wrap(err, "storing metric of trial %d step %d", ms[0].TrialID, ms[0].Step)
			}
			return wrap(err, "storing %d metrics of trials %d..., steps %d...", n, ms[0].TrialID, ms[0].Step)
		}
		ms = ms[n:]
	}
	return nil
}

func (w *writer) events(es []*virga.Event) error {
	for _, e := range es {
		args := func() ([]any, error) {
			var enc column.Encoder
			args := []any{e.ExperimentID, e.TrialID, e.AttemptID, string(e.Kind), e.Message, enc.Time("time", e.Time)}
			if enc.Err != nil {
				return nil, fmt.Errorf("event %s: %w", e.Kind, enc.Err)
			}
			return args, nil
		}
		if err := w.upsert("event "+string(e.Kind), &e.ID, w.st.insertEvent, w.st.updateEvent, args, args); err != nil {
			return err
		}
	}
	return nil
}
