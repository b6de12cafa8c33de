// Package control is Virga's control loop: the only writer of state. It takes
// events from backends (attempt started, exited) and requests from the API
// (submit, report, stop, pause, resume, ask, tell), commits each transition to
// the store before it acts on it, asks searchers for proposals and decisions,
// and tells the backend what to start and stop. After a crash it rebuilds
// everything from the store and adopts or restarts the trials it finds.
//
// It never blocks on a trial: process launches and checkpoint copies run off
// the loop goroutine, and reports are group-committed.
package control

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
	"github.com/virga-ml/virga/internal/store"
)

// Errors returned to API callers.
var (
	// ErrSuperseded means a report came from an attempt that is no longer the
	// trial's current one; the process should exit.
	ErrSuperseded = errors.New("attempt is no longer current")
	// ErrClosed means the controller has stopped.
	ErrClosed = errors.New("controller stopped")
	// ErrCheckpointGone means a report's checkpoint was removed before it was
	// recorded (its content equalled one being dropped); the report is not
	// acknowledged and should be retried, which saves it again.
	ErrCheckpointGone = errors.New("the checkpoint was removed while being recorded; retry the report")
	// ErrCheckpointNotUploaded means a remote attempt's report named a
	// checkpoint it had not uploaded (or whose upload a restart of the
	// server forgot): upload it again, then report.
	ErrCheckpointNotUploaded = errors.New("checkpoint not uploaded")
	// ErrForbidden means a trial's credentials were used for another trial.
	ErrForbidden = errors.New("this token may act only for its own trial")
)

type trialKey struct{}

// AsTrial returns a context whose requests may act only for one trial's
// attempts (the caller authenticated with that trial's token).
func AsTrial(ctx context.Context, trialID int64) context.Context {
	return context.WithValue(ctx, trialKey{}, trialID)
}

// Allowed reports whether ctx may act for trialID (see AsTrial).
func Allowed(ctx context.Context, trialID int64) bool {
	id, ok := ctx.Value(trialKey{}).(int64)
	return !ok || id == trialID
}

// ParseTrialToken returns the trial a token names, if it is a trial token
// signed with secret.
func ParseTrialToken(secret []byte, token string) (int64, bool) {
	rest, ok := strings.CutPrefix(token, "vt")
	if !ok {
		return 0, false
	}
	idText, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(idText, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, hmac.Equal([]byte(token), []byte(TrialToken(secret, id)))
}

// Checkpointer saves and restores trial checkpoint directories.
type Checkpointer interface {
	// SaveFor stores the content of src as an immutable checkpoint whose ID is
	// scoped to owner; an empty ID means src was empty.
	SaveFor(owner, src string) (checkpoint.Info, error)
	// Exists reports whether a checkpoint's files are stored.
	Exists(id string) bool
	// Restore makes dst hold exactly the checkpoint's files.
	Restore(id, dst string) error
	// Delete removes a checkpoint's files (idempotent).
	Delete(id string) error
}

// Config wires a Controller to its parts.
type Config struct {
	Store       store.Store
	Backend     backend.Backend
	Checkpoints Checkpointer
	// DataDir holds per-trial directories (trials/<id>/...).
	DataDir string
	// ReportBase is the server's base URL as trials must reach it, e.g. "http://127.0.0.1:7070".
	ReportBase string
	// Secret signs per-trial tokens. Required.
	Secret []byte
	// NewSearcher makes searchers; nil means search.New.
	NewSearcher func(e *spec.Experiment, seed uint64) (search.Searcher, error)
	// Pricer prices attempts' runs (their Cost and LostCost); nil means
	// everything costs 0.
	Pricer Pricer
	// Place picks the pool each attempt starts on when the backend has pools
	// (backend.Pooled); nil means FirstFit.
	Place PlaceFunc
	// Policy, when set, places and moves the trials of experiments with a
	// deadline across the backend's pools (backend.Pooled), from the same
	// schedule.Experiment snapshot the simulator builds (see policy.go);
	// Place still places the trials of the others. nil means Place for all.
	Policy schedule.ExperimentPolicy
	// PoolInfo is what Policy knows of each pool beyond its status, by pool
	// name: its market, price, node, restart overhead, billing and
	// reliability. A pool without an entry is spot when it is preemptible,
	// free, and of unknown reliability.
	PoolInfo map[string]PoolInfo
	// Clock is the loop's time: its ticker, timeouts, deadlines and the
	// times it records; nil means the real clock (clock.Real).
	Clock clock.Clock
	// Rand picks seeds for experiments that do not set one; nil means a source seeded from the clock.
	Rand *rand.Rand
	// Logger receives operational messages; nil means slog.Default().
	Logger *slog.Logger
	// MaxBatch bounds the inputs handled per loop iteration (default 4096).
	MaxBatch int
	// TickInterval is how often timeouts and deferred work are checked (default 1s).
	TickInterval time.Duration
	// NoTicker means the loop arms no ticker: timeouts, budgets and
	// deferred work are checked only when Step is called, by a driver that
	// moves a fake clock itself (a simulation, internal/sim).
	NoTicker bool
	// Volatile says no server will ever recover from Store (the
	// simulator's in-memory store, dropped when its run ends). The loop
	// then writes an experiment's searcher snapshot only when the
	// experiment ends or the loop stops, instead of with every commit
	// that changed it: recovery restores the searcher from that snapshot,
	// so a store that is recovered from must not be volatile.
	Volatile bool
}

// Controller runs the control loop. Create it with New and run it with Run.
type Controller struct {
	cfg Config
	log *slog.Logger
	now func() time.Time // cfg.Clock.Now
	// remote: the backend runs attempts through the agent on other
	// machines; checkpoints travel over the API (backend.Remote).
	remote bool
	inbox  chan input
	done   chan struct{} // closed when Run returns
	ready  chan struct{} // closed when recovery is done and requests are served

	// live maps attempt IDs to what report handlers need; written by the loop only.
	liveMu sync.RWMutex
	live   map[int64]*liveAttempt

	subMu sync.Mutex
	subs  map[chan wire.Update]int64 // subscriber -> experiment ID (0: all)

	// Loop-owned state (touched only by the loop goroutine).
	exps          map[int64]*expState
	trials        map[int64]*trialState // trials of the experiments that have not ended (ckptrefs.go: track)
	ckptRefs      map[string]int        // references of the trials' checkpoints, per content ID (ckptrefs.go)
	attempts      map[int64]*trialState // live attempt ID -> its trial
	inflight      virga.Resources       // reserved by attempts committed but not yet seen started
	startedSeen   map[int64]bool        // attempts whose Started event arrived
	pendingEvents []*virga.Event        // events to record in the next pass
	pendingInputs []input               // inputs made by recovery, handled in the first pass
	progress      map[*trialState]bool  // trials with progress not yet written
	flushAll      bool                  // write all progress now (shutdown)
	err           error

	// launching holds a channel per launch begun, closed when it returns
	// (Step waits for them); pruned after each pass.
	launching []chan struct{}

	// inflightPool is inflight per pool (for a backend with pools; made on
	// first use).
	inflightPool map[string]virga.Resources

	met *metrics // Prometheus metrics (metrics.go)
}

type expState struct {
	exp       *virga.Experiment
	spec      *spec.Experiment
	searcher  search.Searcher
	exhausted bool
	dirty     bool // searcher state changed since the last commit
	trials    []*trialState
	// active holds the trials of trials that are not settled (settled.go),
	// in the same order; settled sums the others' parts of the policy's
	// snapshot. Every trial with an attempt or waiting for one is active.
	active  []*trialState
	settled settledSums
	// mayHaveSettled says a trial of active may have settled since the
	// last snapshot (it changed state, or its attempt ended): only then
	// does the next snapshot look for settled trials among them.
	mayHaveSettled bool
	// spent is the cost of the experiment's ended attempts; runs and runTime
	// count its attempts that succeeded and their run time (the expected
	// run of the next one, for the budget).
	spent   float64
	runs    int
	runTime time.Duration
	// pol is what the experiment policy keeps of the experiment (policy.go).
	pol expPolicyState
}

type stopReason int

const (
	notStopping     stopReason = iota
	stopEarly                  // the searcher ended it
	stopUser                   // the experiment was stopped
	stopPause                  // the experiment was paused
	stopTimeout                // the attempt ran past its timeout
	stopSearchPause            // the searcher paused it; only the searcher resumes it
	stopMove                   // the experiment policy moves it: it waits again, then resumes from its checkpoint
)

type trialState struct {
	t        *virga.Trial
	exp      *expState
	attempt  *virga.Attempt // current live attempt, nil if none
	stopping stopReason
	ckpts    []virga.Checkpoint // retained checkpoints, oldest first
	started  time.Time          // when the current attempt was created (timeouts)
	// alive is the last moment the current attempt was known to run: its
	// start, its latest report. A lost attempt ends (and is billed) there.
	alive time.Time
	// notBefore delays the next start (after a start refused for capacity).
	notBefore time.Time
	written   time.Time // when the trial row was last written
	// pool is where the attempt about to be created starts (set by
	// schedule, taken by createAttempts).
	pool string
	// fruitless counts the trial's latest attempts in a row that were
	// preempted without saving a new checkpoint.
	fruitless int
	// speed is the trial's measured speed, from its reports (policy.go).
	speed trialSpeed
	// moveTo is the pool the policy moves the trial to while its attempt
	// stops (stopMove; "" to wait): a slot there is kept for it.
	moveTo string
	// idx is the trial's place in its experiment's trials; part is what
	// it adds to the experiment's settledSums while settled (nil: active).
	idx  int
	part *settledPart
	// tracked says the trial is in Controller.trials, its checkpoints
	// counted in Controller.ckptRefs.
	tracked bool
}

// progressInterval bounds how often a reporting trial's row is rewritten.
const progressInterval = time.Second

// liveAttempt is what a report handler needs, shared with the loop under mu.
type liveAttempt struct {
	attemptID    int64
	trialID      int64
	experimentID int64
	ckptDir      string

	mu     sync.Mutex // serialises this attempt's reports and its checkpoint restore
	lastFP string
	lastID string
	// uploaded holds the checkpoints the agent of a remote attempt uploaded
	// and has not yet named in a report (under mu).
	uploaded map[string]checkpoint.Info
	// restore is the checkpoint the attempt started from ("" for none).
	restore string
}

// New makes a Controller; call Run to start it.
func New(cfg Config) (*Controller, error) {
	if cfg.Store == nil || cfg.Backend == nil || cfg.Checkpoints == nil {
		return nil, errors.New("control: Store, Backend and Checkpoints are required")
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("control: Secret is required")
	}
	if cfg.NewSearcher == nil {
		cfg.NewSearcher = search.New
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(uint64(cfg.Clock.Now().UnixNano()), 0x5ee4))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 4096
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = time.Second
	}
	if cfg.Place == nil {
		cfg.Place = FirstFit
	}
	return &Controller{
		cfg:         cfg,
		log:         cfg.Logger,
		now:         cfg.Clock.Now,
		remote:      backend.IsRemote(cfg.Backend),
		inbox:       make(chan input, 8192),
		done:        make(chan struct{}),
		ready:       make(chan struct{}),
		live:        map[int64]*liveAttempt{},
		subs:        map[chan wire.Update]int64{},
		exps:        map[int64]*expState{},
		trials:      map[int64]*trialState{},
		ckptRefs:    map[string]int{},
		attempts:    map[int64]*trialState{},
		startedSeen: map[int64]bool{},
		progress:    map[*trialState]bool{},
		met:         newMetrics(),
	}, nil
}

// TrialToken returns the token that authorises reports for one trial.
func TrialToken(secret []byte, trialID int64) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("virga-trial:" + strconv.FormatInt(trialID, 10)))
	return "vt" + strconv.FormatInt(trialID, 10) + "." + hex.EncodeToString(m.Sum(nil))
}

// TrialOfToken returns the trial a valid trial token was made for.
func (c *Controller) TrialOfToken(token string) (int64, bool) {
	return ParseTrialToken(c.cfg.Secret, token)
}

// TrialDir returns a trial's working checkpoint directory (VIRGA_CHECKPOINT_DIR).
func (c *Controller) TrialDir(trialID int64) string {
	return filepath.Join(c.cfg.DataDir, "trials", strconv.FormatInt(trialID, 10))
}

// AttemptDir returns an attempt's directory (logs, shim files). It depends on
// the attempt's ID alone, so it can be derived when the record lacks it.
func (c *Controller) AttemptDir(attemptID int64) string {
	return filepath.Join(c.cfg.DataDir, "attempts", strconv.FormatInt(attemptID, 10))
}

// Subscribe returns a channel of updates for one experiment (0: all) and a
// cancel function. Slow subscribers miss updates rather than block the loop.
func (c *Controller) Subscribe(experimentID int64) (<-chan wire.Update, func()) {
	ch := make(chan wire.Update, 256)
	c.subMu.Lock()
	c.subs[ch] = experimentID
	c.subMu.Unlock()
	return ch, func() {
		c.subMu.Lock()
		if _, ok := c.subs[ch]; ok {
			delete(c.subs, ch)
			close(ch)
		}
		c.subMu.Unlock()
	}
}

func (c *Controller) publish(ups map[int64]*wire.Update) {
	if len(ups) == 0 {
		return
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	for ch, id := range c.subs {
		for eid, u := range ups {
			if id != 0 && id != eid {
				continue
			}
			select {
			case ch <- *u:
			default: // slow subscriber: it will re-read state
			}
		}
	}
}

// Ready is closed once Run has recovered the state from the store. Until then
// no attempt is known, so reports must not be answered before it.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// Done is closed when Run has returned.
func (c *Controller) Done() <-chan struct{} { return c.done }

// Err returns the error that ended Run, if any.
func (c *Controller) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// send delivers an input to the loop, failing if the loop has stopped.
func (c *Controller) send(ctx context.Context, in input) error {
	select {
	case c.inbox <- in:
		return nil
	case <-c.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call sends a request and waits for its reply.
func call[T any](ctx context.Context, c *Controller, in input, reply chan result[T]) (T, error) {
	var zero T
	if err := c.send(ctx, in); err != nil {
		return zero, err
	}
	select {
	case r := <-reply:
		return r.v, r.err
	case <-c.done:
		// The loop may have answered just before stopping.
		select {
		case r := <-reply:
			return r.v, r.err
		default:
		}
		return zero, ErrClosed
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

type result[T any] struct {
	v   T
	err error
}

// notLive says why attemptID has no live attempt: ErrSuperseded if the
// attempt exists (it ended, or was never started here), an error wrapping
// virga.ErrNotFound if no attempt ever had that ID.
func (c *Controller) notLive(ctx context.Context, attemptID int64) error {
	_, err := c.cfg.Store.Attempt(ctx, attemptID)
	switch {
	case err == nil:
		return fmt.Errorf("attempt %d: %w", attemptID, ErrSuperseded)
	case errors.Is(err, virga.ErrNotFound):
		return fmt.Errorf("attempt %d does not exist: %w", attemptID, virga.ErrNotFound)
	}
	return fmt.Errorf("looking up attempt %d: %w", attemptID, err)
}

func (c *Controller) liveAttempt(id int64) *liveAttempt {
	c.liveMu.RLock()
	defer c.liveMu.RUnlock()
	return c.live[id]
}

func (c *Controller) setLive(la *liveAttempt) {
	c.liveMu.Lock()
	c.live[la.attemptID] = la
	c.liveMu.Unlock()
}

func (c *Controller) dropLive(id int64) {
	c.liveMu.Lock()
	delete(c.live, id)
	c.liveMu.Unlock()
}

func fmtErr(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }
