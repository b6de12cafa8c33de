package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// dialect is SQLite's SQL for the shared reads (see sqlstore).
//
// Metrics reads a trial's metrics from metrics and from metric_log not
// merged yet (see mergeRows), in one statement, so one snapshot. A logged
// row is newer than the merged row of its step, and of several logged rows
// of one step the one with the highest seq is the latest (SQLite takes the
// bare columns of a max() aggregate from the row holding the maximum). Each
// arm comes ordered by step and the two are merged, so a Limit stops early
// rather than sorting the trial's metrics.
var dialect = sqlstore.Dialect{
	Param:  sqlstore.QuestionMark,
	NoRows: sql.ErrNoRows,
	Metrics: `SELECT trial_id, step, attempt_id, values_json, time FROM metrics
		WHERE trial_id = ?1 AND step > ?2
			AND step NOT IN (SELECT step FROM metric_log WHERE trial_id = ?1 AND step > ?2)
		UNION ALL
		SELECT trial_id, step, attempt_id, values_json, time FROM (
			SELECT trial_id, step, attempt_id, values_json, time, max(seq) FROM metric_log
			WHERE trial_id = ?1 AND step > ?2 GROUP BY step)
		ORDER BY step`,
	CheckpointOrder: `time, rowid`,
}

// readers runs the shared reads on the read-only connections.
type readers struct{ db *sql.DB }

func (r readers) Query(ctx context.Context, query string, args []any, each func(sqlstore.Row) error) error {
	rows, err := r.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (r readers) QueryRow(ctx context.Context, query string, args []any, scan func(sqlstore.Row) error) error {
	return scan(r.db.QueryRowContext(ctx, query, args...))
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
