// Package postgres is Virga's PostgreSQL store, for installations that want a
// shared, replicated database instead of the default SQLite file. It persists
// what it is told and decides nothing; it must never hold state outside the
// database or reorder a caller's batch.
//
// Each Apply is one transaction whose statements go to the server as one
// pipelined batch (metrics as one multi-row upsert), so a group commit of
// hundreds of reports costs a few round trips, not hundreds. Tables live in
// the connection's search_path, so one database can hold several isolated
// Virga schemas (postgres://.../db?search_path=virga_prod).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/migrations"
	"github.com/virga-ml/virga/internal/store/sqlstore"
)

// DefaultMaxConns is the default bound on open connections; set another with
// the URL parameter pool_max_conns.
const DefaultMaxConns = 8

// Store is a store.Store on a PostgreSQL database.
//
// Values round-trip exactly, with these rules shared by both stores: times
// come back in UTC to the nanosecond (years 1678 to 2262; the zero time is
// stored as NULL and comes back zero); Trial.HParams goes through JSON, so
// every number, integers included, comes back as float64; a NaN Latest or
// Best is stored as NULL and comes back nil; NaN and infinite metric values
// and Trial.Prediction numbers round-trip; empty byte slices come back nil.
type Store struct {
	// Reader gives the reads (Experiment, Trials, Metrics, ...), shared
	// with the SQLite store, run on pooled connections.
	*sqlstore.Reader

	pool      *pool
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Open connects to the PostgreSQL database at url (postgres:// or
// postgresql://, or a key=value connection string) and brings its schema up
// to date. Besides the parameters libpq knows, url may set pool_max_conns
// (default DefaultMaxConns) and any server setting such as search_path. It
// fails if the database was written by a newer Virga whose schema it does not
// know. An error that waiting may cure (see Unavailable) wraps
// store.ErrUnavailable.
func Open(ctx context.Context, url string) (*Store, error) {
	connURL, maxConns, err := poolParams(url)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	cfg, err := pgx.ParseConfig(connURL)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store: %w", err)
	}
	s := &Store{pool: newPool(cfg, maxConns)}
	s.Reader = sqlstore.NewReader(readers{s}, dialect)
	if err := s.migrate(ctx); err != nil {
		s.Close()
		if Unavailable(err) && ctx.Err() == nil {
			return nil, fmt.Errorf("opening postgres store on %s: %w: %w", cfg.Host, store.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("opening postgres store on %s: %w", cfg.Host, err)
	}
	return s, nil
}

// Unavailable reports whether err says that the server cannot be reached
// yet or is not ready for connections, which waiting may cure: nothing
// listens (connection refused), the network or the host is unreachable or
// too slow, the server hung up during the handshake, or it answered
// SQLSTATE 57P03 cannot_connect_now (starting up, in recovery, shutting
// down), another shutdown code, too_many_connections or a connection
// exception (class 08). Every other server error, authentication failures
// and missing databases included, is not.
func Unavailable(err error) bool {
	if pe, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pe.Code {
		case "57P03", // cannot_connect_now
			"57P01", "57P02", // admin_shutdown, crash_shutdown: a restart
			"53300",                   // too_many_connections
			"08000", "08001", "08006": // connection exceptions
			return true
		}
		return false
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true // the server closed the connection during the handshake
	}
	if de, ok := errors.AsType[*net.DNSError](err); ok {
		return de.IsTimeout || de.IsTemporary
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return false
}

// poolParams removes pool_max_conns from a URL and returns its value.
func poolParams(raw string) (string, int, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return raw, DefaultMaxConns, nil // a key=value string: pgx parses it
	}
	q := u.Query()
	v := q.Get("pool_max_conns")
	if v == "" {
		return raw, DefaultMaxConns, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("pool_max_conns=%q: want a positive integer", v)
	}
	q.Del("pool_max_conns")
	u.RawQuery = q.Encode()
	return u.String(), n, nil
}

// migrate applies the migrations newer than the schema's version in one
// transaction, under an advisory lock keyed by the schema, so that processes
// opening the same database at once migrate it exactly once.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations.List(migrations.Postgres)
	if err != nil {
		return err
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('virga.migrate.' || COALESCE(current_schema(), '')))`); err != nil {
			return fmt.Errorf("migrating: taking the lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
			version    INTEGER PRIMARY KEY,
			applied_at BIGINT NOT NULL)`); err != nil {
			return fmt.Errorf("migrating: creating schema_version: %w", err)
		}
		var cur int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&cur); err != nil {
			return fmt.Errorf("migrating: reading schema version: %w", err)
		}
		if latest := ms[len(ms)-1].Version; cur > latest {
			return fmt.Errorf("database schema version %d is newer than this Virga knows (%d): upgrade Virga", cur, latest)
		}
		for _, m := range ms {
			if m.Version <= cur {
				continue
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)`,
				m.Version, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("migration %s: recording version: %w", m.Name, err)
			}
		}
		return nil
	})
}

// tx runs fn in a transaction on a pooled connection and commits if fn succeeds.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return err
	}
	defer s.pool.release(c)
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// conn runs fn with a pooled connection.
func (s *Store) conn(ctx context.Context, fn func(*pgx.Conn) error) error {
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return err
	}
	defer s.pool.release(c)
	return fn(c)
}

// SchemaVersion returns the version of the newest migration applied.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.conn(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_version`).Scan(&v)
	})
	if err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	return v, nil
}

// Close closes the store's connections. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if err := s.pool.close(); err != nil {
			s.closeErr = fmt.Errorf("closing postgres store: %w", err)
		}
	})
	return s.closeErr
}

// wrap adds context to a statement's error and maps constraint failures onto
// Virga's sentinels: a missing referenced row is virga.ErrNotFound, a
// duplicate key is virga.ErrConflict.
func wrap(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "23503": // foreign_key_violation
			return fmt.Errorf("%s: a referenced row is missing: %w (%w)", msg, virga.ErrNotFound, err)
		case "23505": // unique_violation
			return fmt.Errorf("%s: duplicate: %w (%w)", msg, virga.ErrConflict, err)
		}
	}
	return fmt.Errorf("%s: %w", msg, err)
}
