// Package sqlite is Virga's default store: one SQLite database file in WAL
// mode with synchronous=FULL, so a batch that Apply has acknowledged survives
// a kill -9 of the process, an OS crash and a power loss (see SyncNormal for
// the faster setting that gives up the last two). It persists what it is told and decides nothing;
// it must never hold state outside the database or reorder a caller's batch.
//
// Writes go through a single connection (SQLite allows one writer at a time),
// reads through a separate pool of read-only connections, so readers never
// wait for a write in progress.
//
// Metrics go first to metric_log, a table in arrival order, so that a commit
// of one report from each of many trials appends to a page or two instead of
// rewriting one page of metrics per trial; Apply merges the log into metrics
// every mergeRows rows, in its transaction, as do Open (what a killed process
// left) and Close. Metrics reads both tables in one statement.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/migrations"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// busyTimeout is how long a statement waits for another process's lock on
// the database before failing with SQLITE_BUSY.
const busyTimeout = 10 * time.Second

// maxReaders bounds the read-only connections.
const maxReaders = 4

// Store is a store.Store on one SQLite database file.
//
// Values round-trip exactly, with these rules shared by both stores: times
// come back in UTC to the nanosecond (years 1678 to 2262; the zero time is
// stored as NULL and comes back zero); Trial.HParams goes through JSON, so
// every number, integers included, comes back as float64; a NaN Latest or
// Best is stored as NULL and comes back nil; NaN and infinite metric values
// and Trial.Prediction numbers round-trip; empty byte slices come back nil.
type Store struct {
	// Reader gives the reads (Experiment, Trials, Metrics, ...), shared
	// with the PostgreSQL store, run on r.
	*sqlstore.Reader

	path string
	w    *sql.DB // the single writer connection
	st   *stmts  // the writer's prepared statements
	r    *sql.DB // read-only connections
	// wmu serialises the writer's transactions (the one connection does
	// too) so that logRows, the rows in metric_log as far as this Store
	// knows, is counted exactly. It only decides when to merge the log:
	// reads and merges are correct whatever it says.
	wmu       sync.Mutex
	logRows   int
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Synchronous is SQLite's synchronous setting, which decides when a commit
// reaches the disk.
type Synchronous string

const (
	// SyncFull (the default) fsyncs the WAL on every commit: a batch Apply
	// has acknowledged survives a kill -9 of the process, an OS crash and a
	// power loss.
	SyncFull Synchronous = "full"
	// SyncNormal writes each commit to the WAL file (the OS's page cache)
	// without fsync, syncing only at checkpoints. An acknowledged batch
	// still survives the process being killed (kill -9, a crash, an OOM
	// kill), because the OS keeps the written pages; an OS crash or power
	// loss may lose the most recent acknowledged batches (never corrupting
	// the database, which comes back as of an earlier commit).
	SyncNormal Synchronous = "normal"
)

// ParseSynchronous reads a synchronous setting: "full" or "normal", in any case.
func ParseSynchronous(v string) (Synchronous, error) {
	switch s := Synchronous(strings.ToLower(v)); s {
	case SyncFull, SyncNormal:
		return s, nil
	}
	return "", fmt.Errorf("synchronous=%q: want full or normal", v)
}

// Options are the settings of OpenWith. The zero value is Open's defaults.
type Options struct {
	Synchronous Synchronous // "" means SyncFull
}

// Open opens (creating if needed, with its directory) the SQLite database at
// path and brings its schema up to date, with synchronous=FULL. It fails if
// the database was written by a newer Virga whose schema it does not know.
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, Options{})
}

// OpenWith is Open with settings other than the defaults.
func OpenWith(ctx context.Context, path string, o Options) (*Store, error) {
	syncMode := SyncFull
	if o.Synchronous != "" {
		var err error
		if syncMode, err = ParseSynchronous(string(o.Synchronous)); err != nil {
			return nil, fmt.Errorf("opening sqlite store: %w", err)
		}
	}
	if path == "" {
		return nil, errors.New("opening sqlite store: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("opening sqlite store: creating directory: %w", err)
	}
	// A file: URI, so that '?' or '#' in the path cannot be read as parameters.
	base := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			"foreign_keys(1)",
			"synchronous(" + strings.ToUpper(string(syncMode)) + ")",
		},
	}.Encode()
	s := &Store{path: abs}
	// The writer: WAL (persistent in the file) and BEGIN IMMEDIATE, so a
	// transaction takes the write lock up front instead of failing to upgrade.
	s.w, err = sql.Open("sqlite", base+"&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := s.migrateRetrying(ctx); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
	}
	if s.st, err = prepareStmts(ctx, s.w); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
	}
	// Metrics logged but not merged when the last process stopped without
	// closing the store (a kill -9, a crash) are merged now.
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM metric_log`).Scan(&s.logRows); err != nil {
		s.st.close()
		s.w.Close()
		return nil, fmt.Errorf("opening sqlite store %s: counting metric_log: %w", abs, err)
	}
	if s.logRows > 0 {
		if err := s.merge(ctx); err != nil {
			s.st.close()
			s.w.Close()
			return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
		}
	}
	s.r, err = sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		s.st.close()
		s.w.Close()
		return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
	}
	s.r.SetMaxOpenConns(maxReaders)
	s.r.SetMaxIdleConns(maxReaders)
	s.Reader = sqlstore.NewReader(readers{s.r}, dialect)
	if err := s.r.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("opening sqlite store %s: %w", abs, err)
	}
	return s, nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// migrate applies the migrations newer than the database's schema version,
// all in one write transaction: a second process opening the same file at the
// same time waits for the lock and then finds nothing left to do.
// migrateRetrying runs migrate, trying again while another process opening the
// same new file holds it busy: SQLite answers SQLITE_BUSY at once, without
// the busy timeout, while a connection switches a fresh file to WAL.
func (s *Store) migrateRetrying(ctx context.Context) error {
	wait := 5 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.migrate(ctx)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.List(migrations.SQLite)
	if err != nil {
		return err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("migrating: creating schema_version: %w", err)
	}
	var cur int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&cur); err != nil {
		return fmt.Errorf("migrating: reading schema version: %w", err)
	}
	if latest := ms[len(ms)-1].Version; cur > latest {
		return fmt.Errorf("database schema version %d is newer than this Virga knows (%d): upgrade Virga", cur, latest)
	}
	for _, m := range ms {
		if m.Version <= cur {
			continue
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`,
			m.Version, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("migration %s: recording version: %w", m.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrating: committing: %w", err)
	}
	return nil
}

// SchemaVersion returns the version of the newest migration applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}

// Close merges metric_log into metrics and closes the database. It is safe
// to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.st != nil {
			errs = append(errs, s.merge(context.Background()))
		}
		if s.r != nil {
			errs = append(errs, s.r.Close())
		}
		if s.st != nil {
			errs = append(errs, s.st.close())
		}
		errs = append(errs, s.w.Close())
		if err := errors.Join(errs...); err != nil {
			s.closeErr = fmt.Errorf("closing sqlite store %s: %w", s.path, err)
		}
	})
	return s.closeErr
}

// wrap adds context to a statement's error and maps constraint failures onto
// Virga's sentinels: a missing referenced row is virga.ErrNotFound, a
// duplicate key is virga.ErrConflict.
func wrap(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
			return fmt.Errorf("%s: a referenced row is missing: %w (%w)", msg, virga.ErrNotFound, err)
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("%s: duplicate: %w (%w)", msg, virga.ErrConflict, err)
		}
	}
	return fmt.Errorf("%s: %w", msg, err)
}
