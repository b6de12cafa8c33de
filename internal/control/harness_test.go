package control_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/checkpoint"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/store"
	"github.com/virga-ml/virga/internal/store/sqlite"
)

// waitFor bounds how long a harness waits for the controller to recover
// and for real processes.
const waitFor = 30 * time.Second

// harnessStart is the time on a harness's clock when it is made.
var harnessStart = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// maxPasses bounds the loop passes a harness steps through waiting for a
// decision: a decision may take more than one (a failed start comes back
// in the next pass) but never many.
const maxPasses = 5

// fakeBackend is a recording backend: Start records the spec and hands it to
// the test, which then emits Started and Exited events by hand.
type fakeBackend struct {
	name   string
	events chan backend.Event
	starts chan *backend.StartSpec // every successful Start, in order
	stopCh chan int64              // every Stop, in order

	mu      sync.Mutex
	specs   []*backend.StartSpec
	stops   []int64
	adopted []*virga.Attempt
	// reapedAfter is how many attempts had been adopted when AdoptedAll
	// was called (its first call), -1 before.
	reapedAfter int
	full        bool // Start refuses with ErrNoCapacity and Free is zero
	closed      bool
	// clk is the harness's clock, for the times of the events the fake
	// makes itself (set by harness.start).
	clk *clock.Fake
}

var _ backend.Backend = (*fakeBackend)(nil)

func newFakeBackend() *fakeBackend {
	return &fakeBackend{name: "fake", events: make(chan backend.Event, 4096), starts: make(chan *backend.StartSpec, 4096), stopCh: make(chan int64, 4096), reapedAfter: -1}
}

func (f *fakeBackend) Name() string { return f.name }

func (f *fakeBackend) Start(ctx context.Context, s *backend.StartSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full {
		return fmt.Errorf("fake: %w", virga.ErrNoCapacity)
	}
	for _, o := range f.specs {
		if o.AttemptID == s.AttemptID {
			return fmt.Errorf("fake: attempt %d started twice", s.AttemptID)
		}
	}
	cp := *s
	f.specs = append(f.specs, &cp)
	f.starts <- &cp
	return nil
}

func (f *fakeBackend) Stop(attemptID int64, grace time.Duration) error {
	f.mu.Lock()
	f.stops = append(f.stops, attemptID)
	f.mu.Unlock()
	select {
	case f.stopCh <- attemptID:
	default:
	}
	return nil
}

func (f *fakeBackend) Events() <-chan backend.Event { return f.events }

func (f *fakeBackend) Free() virga.Resources {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.full {
		return virga.Resources{}
	}
	return virga.Resources{CPU: 1000, MemoryMB: 1 << 30, GPU: 100}
}

func (f *fakeBackend) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.events)
	}
	return nil
}

func (f *fakeBackend) setFull(v bool) {
	f.mu.Lock()
	f.full = v
	f.mu.Unlock()
}

func (f *fakeBackend) stopped(attemptID int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.stops, attemptID)
}

func (f *fakeBackend) emit(ev backend.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.events <- ev
	}
}

// adoptingBackend is a fakeBackend that can adopt attempts of an earlier
// server (and records when it is told that all are adopted).
type adoptingBackend struct{ *fakeBackend }

var (
	_ backend.Backend = (*adoptingBackend)(nil)
	_ backend.Reaper  = (*adoptingBackend)(nil)
)

func (a *adoptingBackend) AdoptedAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reapedAfter < 0 {
		a.reapedAfter = len(a.adopted)
	}
}

func (a *adoptingBackend) Adopt(ctx context.Context, at *virga.Attempt, res virga.Resources) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	cp := *at
	a.adopted = append(a.adopted, &cp)
	return nil
}

// countingStore is the real store, counting Apply calls and the rows they
// write or delete.
type countingStore struct {
	store.Store
	applies atomic.Int64
	rows    atomic.Int64
	// dieAfterInsert, when set, makes every write after the first that
	// inserts an experiment fail, as if the process had died right after
	// that commit.
	dieAfterInsert, dead atomic.Bool
}

// errDied is the error of a countingStore's writes after its death.
var errDied = errors.New("the process died")

func (c *countingStore) Apply(ctx context.Context, b *store.Batch) error {
	if c.dead.Load() {
		return errDied
	}
	c.applies.Add(1)
	c.rows.Add(int64(len(b.Experiments) + len(b.Trials) + len(b.NewAttempts) + len(b.NewExperimentEvents) + len(b.Attempts) +
		len(b.Checkpoints) + len(b.DeleteCheckpoints) + len(b.Metrics) + len(b.Events)))
	inserts := slices.ContainsFunc(b.Experiments, func(e *virga.Experiment) bool { return e.ID == 0 })
	err := c.Store.Apply(ctx, b)
	if err == nil && inserts && c.dieAfterInsert.Load() {
		c.dead.Store(true)
	}
	return err
}

// harness is a controller over a real SQLite store and a real checkpoint
// store in a temporary directory, with a fake backend.
type harness struct {
	t      *testing.T
	dir    string
	st     *countingStore
	ck     *checkpoint.Store
	be     *fakeBackend
	ctl    *control.Controller
	cancel context.CancelFunc
	runErr chan error
	tick   time.Duration
	// clk is the controller's clock: it moves only when the test advances
	// it. The loop's ticks are the test's Steps unless ticks is set: a
	// tick fired by Advance would race with the events the test emits.
	clk   *clock.Fake
	ticks bool
	// pricer, when set, is the controller's Pricer.
	pricer control.Pricer
	// place, when set, is the controller's placement policy.
	place control.PlaceFunc
	// policy and poolInfo, if set, are the controller's experiment policy
	// and what it knows of the pools.
	policy   schedule.ExperimentPolicy
	poolInfo map[string]control.PoolInfo
	// volatile is the controller's Config.Volatile.
	volatile bool
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "virga.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ck, err := checkpoint.Open(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, dir: dir, st: &countingStore{Store: st}, ck: ck, clk: clock.NewFake(harnessStart)}
}

// start runs a controller over the harness's store with be (a *fakeBackend or
// *adoptingBackend), waiting until it has recovered.
func (h *harness) start(be backend.Backend) {
	h.t.Helper()
	switch b := be.(type) {
	case *fakeBackend:
		h.be = b
	case *adoptingBackend:
		h.be = b.fakeBackend
	case interface{ fake() *fakeBackend }:
		h.be = b.fake()
	}
	h.be.clk = h.clk
	ctl, err := control.New(control.Config{Store: h.st, Backend: be, Checkpoints: h.ck, DataDir: h.dir,
		ReportBase: "http://127.0.0.1:1", Secret: []byte("test secret"), TickInterval: h.tick, Pricer: h.pricer, Clock: h.clock(), Place: h.place,
		Policy: h.policy, PoolInfo: h.poolInfo, Volatile: h.volatile})
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.ctl, h.cancel, h.runErr = ctl, cancel, make(chan error, 1)
	go func() { h.runErr <- ctl.Run(ctx) }()
	h.t.Cleanup(h.crash)
	select {
	case <-ctl.Ready():
	case <-ctl.Done():
		h.t.Fatalf("controller stopped during recovery: %v", <-h.runErr)
	case <-time.After(waitFor):
		h.t.Fatal("controller not ready")
	}
}

// stepClock is a fake clock whose tickers never tick.
type stepClock struct{ *clock.Fake }

func (c stepClock) NewTicker(d time.Duration) clock.Ticker {
	t := c.Fake.NewTicker(d)
	t.Stop()
	return t
}

func (h *harness) clock() clock.Clock {
	if h.ticks {
		return h.clk
	}
	return stepClock{h.clk}
}

// crash stops the controller without letting anything finish (idempotent).
func (h *harness) crash() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.runErr; err != nil {
		h.t.Errorf("Run: %v", err)
	}
	h.cancel = nil
	h.be.Close()
}

func (h *harness) submit(y string) *virga.Experiment {
	h.t.Helper()
	e, err := h.ctl.Submit(context.Background(), "exp.yaml", []byte(y))
	if err != nil {
		h.t.Fatalf("Submit: %v", err)
	}
	return e
}

// step makes the loop take one pass and waits until it has acted on it.
func (h *harness) step() {
	h.t.Helper()
	if err := h.ctl.Step(context.Background()); err != nil {
		h.t.Fatalf("Step: %v", err)
	}
}

// advance moves the clock by d and steps the loop.
func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	h.clk.Advance(d)
	h.step()
}

// nextStart returns the backend's next Start, stepping the loop until it
// makes one.
func (h *harness) nextStart() *backend.StartSpec {
	h.t.Helper()
	for range maxPasses {
		select {
		case s := <-h.be.starts:
			return s
		default:
		}
		h.step()
	}
	select {
	case s := <-h.be.starts:
		return s
	default:
		h.t.Fatalf("no attempt started in %d passes", maxPasses)
		return nil
	}
}

// noStart checks that the loop, stepped until it has nothing left to do,
// starts no attempt.
func (h *harness) noStart() {
	h.t.Helper()
	for range maxPasses {
		h.step()
		select {
		case s := <-h.be.starts:
			h.t.Fatalf("unexpected start of attempt %d (trial %d)", s.AttemptID, s.TrialID)
		default:
		}
	}
}

func (h *harness) started(s *backend.StartSpec) {
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: h.clk.Now(), PID: 1000 + int(s.AttemptID)})
}

func (h *harness) exited(attemptID int64, code int) {
	h.be.emit(backend.Event{AttemptID: attemptID, Kind: backend.Exited, Time: h.clk.Now(), ExitCode: &code})
}

// succeeded reports the objective once and exits 0: a trial with a result.
func (h *harness) succeeded(attemptID int64) {
	h.t.Helper()
	h.report(attemptID, 0, 1)
	h.exited(attemptID, 0)
}

func (h *harness) signalled(attemptID int64, sig string) {
	h.be.emit(backend.Event{AttemptID: attemptID, Kind: backend.Exited, Time: h.clk.Now(), Signal: sig})
}

func (h *harness) lost(attemptID int64) {
	h.be.emit(backend.Event{AttemptID: attemptID, Kind: backend.Exited, Time: h.clk.Now(), Lost: true, Message: "vanished"})
}

// eventually steps the loop until cond holds, failing after maxPasses.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	for range maxPasses {
		if cond() {
			return
		}
		h.step()
	}
	if !cond() {
		for _, e := range h.evs() {
			h.t.Logf("event %+v", e)
		}
		h.t.Fatalf("still waiting for %s after %d passes of the loop", what, maxPasses)
	}
}

func (h *harness) trial(id int64) *virga.Trial {
	h.t.Helper()
	t, err := h.st.Trial(context.Background(), id)
	if err != nil {
		h.t.Fatalf("Trial(%d): %v", id, err)
	}
	return t
}

func (h *harness) exp(id int64) *virga.Experiment {
	h.t.Helper()
	e, err := h.st.Experiment(context.Background(), id)
	if err != nil {
		h.t.Fatalf("Experiment(%d): %v", id, err)
	}
	return e
}

func (h *harness) attempts(trialID int64) []*virga.Attempt {
	h.t.Helper()
	as, err := h.st.Attempts(context.Background(), trialID)
	if err != nil {
		h.t.Fatal(err)
	}
	return as
}

func (h *harness) trials(expID int64) []*virga.Trial {
	h.t.Helper()
	ts, err := h.st.Trials(context.Background(), expID)
	if err != nil {
		h.t.Fatal(err)
	}
	return ts
}

func (h *harness) waitTrial(id int64, state virga.TrialState) *virga.Trial {
	h.t.Helper()
	var t *virga.Trial
	h.eventually(fmt.Sprintf("trial %d to be %s", id, state), func() bool {
		t = h.trial(id)
		return t.State == state
	})
	return t
}

func (h *harness) waitExp(id int64, state virga.ExperimentState) *virga.Experiment {
	h.t.Helper()
	var e *virga.Experiment
	h.eventually(fmt.Sprintf("experiment %d to be %s", id, state), func() bool {
		e = h.exp(id)
		return e.State == state
	})
	return e
}

// report sends one report, failing the test on error.
func (h *harness) report(attemptID, step int64, loss float64) string {
	h.t.Helper()
	d, err := h.ctl.Report(context.Background(), attemptID, wire.Report{Step: step, Metrics: map[string]float64{"loss": loss}})
	if err != nil {
		h.t.Fatalf("Report(attempt %d, step %d): %v", attemptID, step, err)
	}
	return d.String()
}

// expYAML is an experiment of sh trials (the fake never runs them).
func expYAML(name string, extra string) string {
	return fmt.Sprintf(`name: %s
entrypoint: [sh, -c, "exit 0"]
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
seed: 42
%s
`, name, extra)
}

func storeMetricFilter(trialID int64) store.MetricFilter {
	return store.MetricFilter{TrialID: trialID, AfterStep: -1}
}

func (h *harness) evs() []virga.Event {
	evs, _ := h.st.Events(context.Background(), store.EventFilter{})
	return evs
}
