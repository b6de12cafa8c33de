// Package sqlstore is the read half shared by the SQL stores (sqlite,
// postgres): the queries of store.Store's reads, the scanning of their rows
// into Virga's values, and the column lists their writes insert. A store
// gives it a DB to run queries on and a Dialect for what its SQL spells
// differently. It opens no connection and writes nothing; it must never
// import a driver.
package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/virga-ml/virga"
)

// Row is one result row: a *sql.Row, *sql.Rows, pgx.Row or pgx.Rows.
type Row interface{ Scan(dest ...any) error }

// DB runs a store's read queries.
type DB interface {
	// Query runs query and calls each with every row in order, returning
	// the first error of the query or of each.
	Query(ctx context.Context, query string, args []any, each func(Row) error) error
	// QueryRow runs query and calls scan with its first row, whose Scan
	// fails with the Dialect's NoRows error when there is none.
	QueryRow(ctx context.Context, query string, args []any, scan func(Row) error) error
}

// Dialect is what a store's SQL spells its own way.
type Dialect struct {
	// Param is the placeholder of the nth parameter (from 1): "?" or "$n".
	Param func(n int) string
	// NoRows is the error a Row's Scan wraps when there is no row.
	NoRows error
	// Metrics is the query of one trial's metrics: parameter 1 the trial
	// ID, parameter 2 AfterStep; rows (trial_id, step, attempt_id,
	// values_json, time) ordered by step, to which a LIMIT may be appended.
	Metrics string
	// CheckpointOrder orders a trial's checkpoints oldest first: by time,
	// the zero (NULL) time first, then in the order they were inserted.
	CheckpointOrder string
}

// QuestionMark is SQLite's placeholder.
func QuestionMark(int) string { return "?" }

// Dollar is PostgreSQL's placeholder.
func Dollar(n int) string { return "$" + strconv.Itoa(n) }

// params returns n placeholders from the first, separated by commas.
func (d Dialect) params(first, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = d.Param(first + i)
	}
	return strings.Join(ps, ", ")
}

// Reader is store.Store's reads on a DB. A SQL store embeds one.
type Reader struct {
	db DB
	d  Dialect
}

// NewReader returns the reads of a store on db, in dialect d.
func NewReader(db DB, d Dialect) *Reader { return &Reader{db: db, d: d} }

// The columns of the rows read back and inserted, in the order the scan
// functions read them (after the ID, for experiments, trials and attempts).
const (
	ExperimentCols = `name, state, spec, spec_file, searcher_state, message, created_at, updated_at, ended_at, reason`
	TrialCols      = `experiment_id, seq, request, state, hparams, attempts, restarts, step, latest, best,
	best_step, checkpoint, message, created_at, updated_at, ended_at, parent, parent_checkpoint, parent_step, prediction, reason`
	AttemptCols = `trial_id, number, state, outcome, backend, pid, exit_code, signal, restored, dir, message,
	created_at, started_at, ended_at, pool, cost, lost_cost`
	ModelVersionCols = `name, version, files_id, size, files, format, signature, experiment_id, trial_id, step,
	checkpoint_id, hparams, metrics, description, created_at`
)

// list runs a query and scans each row with scan.
func list[T any](ctx context.Context, r *Reader, what string, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	var out []T
	err := r.db.Query(ctx, query, args, func(row Row) error {
		v, err := scan(row)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", what, err)
	}
	return out, nil
}

// one runs a query for one row; no row is virga.ErrNotFound.
func one[T any](ctx context.Context, r *Reader, what string, scan func(Row) (T, error), query string, args ...any) (T, error) {
	var v T
	err := r.db.QueryRow(ctx, query, args, func(row Row) error {
		var err error
		v, err = scan(row)
		return err
	})
	if errors.Is(err, r.d.NoRows) {
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
