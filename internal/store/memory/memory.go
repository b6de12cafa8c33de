// Package memory is a store.Store held in Go maps and slices, for the
// simulator, which runs the real control loop under a virtual clock and
// needs thousands of trials a second, and for tests. It passes the same
// conformance suite as the SQLite and PostgreSQL stores and keeps their
// semantics (IDs, orderings, all-or-nothing batches, errors, the value
// round-trip rules of package column); it must never persist anything: what
// it holds is gone when the process ends, so Virga's server never opens one.
//
// Every operation is indexed: trials by experiment (ordered by Seq),
// attempts by trial (ordered by Number), live attempts in a set, metrics and
// checkpoints by trial, events by ID, experiment and trial. Inserting the
// next step of a trial's metrics, the next trial of an experiment or the
// next attempt of a trial appends; an update replaces one row in place.
//
// Reads return copies: the caller owns every value returned and may change
// it (the control loop does), so nothing handed out aliases the store's rows.
// A list copies only the rows it returns (Metrics with AfterStep and Limit
// binary-searches its start and copies no more than Limit rows), and a
// row's maps and pointers (HParams, metric Values, Latest, Best, ExitCode,
// Prediction, Spec, SearcherState) are cloned with it. Apply likewise keeps
// copies, never the caller's maps or slices.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/migrations"
)

// ErrClosed is returned by every method of a Store after Close.
var ErrClosed = errors.New("the memory store is closed")

// Store is a store.Store in memory. Writers (Apply, PutToken and the model
// registry's writes) hold an exclusive lock for the whole batch, readers a
// shared one, so a read sees every batch whole or not at all.
type Store struct {
	mu     sync.RWMutex
	closed bool
	schema int

	// last* are the highest IDs given, so IDs start at 1 and increase; a
	// failed batch gives back the IDs it took (as SQLite does).
	lastExperiment, lastTrial, lastAttempt, lastEvent, lastToken int64

	experiments map[int64]*experimentRow
	expOrder    []*experimentRow // by ID
	trials      map[int64]*trialRow
	attempts    map[int64]*virga.Attempt
	live        map[int64]*virga.Attempt // attempts not EXITED

	events        []virga.Event   // by ID
	eventsByExp   map[int64][]int // indexes into events, by ID
	eventsByTrial map[int64][]int

	tokens      map[int64]*store.Token
	tokenByHash map[string]int64

	models    map[string]*modelRow
	filesRefs map[string]int // versions per FilesID, over all models
}

var _ store.Store = (*Store)(nil)

// experimentRow is a stored experiment and its trials, ordered by Seq.
type experimentRow struct {
	e      virga.Experiment
	trials []*trialRow
}

// trialRow is a stored trial and what hangs off it.
type trialRow struct {
	t        virga.Trial
	attempts []*virga.Attempt   // by Number
	metrics  []virga.Metric     // by Step, one per step
	ckpts    []virga.Checkpoint // by Time, then insertion
}

// New returns an empty store. Its SchemaVersion is the newest SQLite
// migration's: it holds exactly what a database at that version holds.
func New() *Store {
	// The embedded migrations are part of the binary; failing to list them
	// is a build error that every store test would catch.
	v, err := migrations.Latest(migrations.SQLite)
	if err != nil {
		panic(fmt.Sprintf("memory store: %v", err))
	}
	return &Store{
		schema:        v,
		experiments:   map[int64]*experimentRow{},
		trials:        map[int64]*trialRow{},
		attempts:      map[int64]*virga.Attempt{},
		live:          map[int64]*virga.Attempt{},
		eventsByExp:   map[int64][]int{},
		eventsByTrial: map[int64][]int{},
		tokens:        map[int64]*store.Token{},
		tokenByHash:   map[string]int64{},
		models:        map[string]*modelRow{},
		filesRefs:     map[string]int{},
	}
}

// SchemaVersion returns the schema version the store's contents match.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	if err := s.rlock(ctx); err != nil {
		return 0, fmt.Errorf("reading schema version: %w", err)
	}
	defer s.mu.RUnlock()
	return s.schema, nil
}

// Close drops the store's contents. It is safe to call more than once;
// every other method then fails with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.experiments, s.expOrder, s.trials, s.attempts, s.live = nil, nil, nil, nil, nil
	s.events, s.eventsByExp, s.eventsByTrial = nil, nil, nil
	s.tokens, s.tokenByHash, s.models, s.filesRefs = nil, nil, nil, nil
	return nil
}

// rlock takes the shared lock, unless ctx is done or the store closed.
func (s *Store) rlock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// lock takes the exclusive lock, unless ctx is done or the store closed.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}
