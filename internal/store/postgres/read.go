package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/column"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// dialect is PostgreSQL's SQL for the shared reads (see sqlstore).
var dialect = sqlstore.Dialect{
	Param:  sqlstore.Dollar,
	NoRows: pgx.ErrNoRows,
	Metrics: `SELECT trial_id, step, attempt_id, values_json, time FROM metrics
		WHERE trial_id = $1 AND step > $2 ORDER BY step`,
	CheckpointOrder: `time NULLS FIRST, pos`,
}

// readers runs the shared reads on pooled connections.
type readers struct{ s *Store }

func (r readers) Query(ctx context.Context, query string, args []any, each func(sqlstore.Row) error) error {
	return r.s.conn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, query, args...)
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
	})
}

func (r readers) QueryRow(ctx context.Context, query string, args []any, scan func(sqlstore.Row) error) error {
	return r.s.conn(ctx, func(c *pgx.Conn) error { return scan(c.QueryRow(ctx, query, args...)) })
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
