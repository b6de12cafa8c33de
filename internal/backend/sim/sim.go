// Package sim is a simulated backend: trials whose steps take the times of a
// learning-curve table and report its values, on capacity pools whose spot
// availability follows a timeline, in virtual time on a clock.Fake. It
// implements backend.Backend and backend.Pooled with the semantics of the
// real backends (Started at once, progress after the pool's restart
// overhead, SIGTERM on Stop
// and at a reclaim's warning, Exited marked Preempted), so that the real
// control loop runs unchanged on it. It never decides what runs, and it
// never reads the wall clock: a driver (internal/sim) moves its time with
// Advance and makes its trials' reports.
package sim

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
)

// Curves is where the simulated trials come from: internal/sim's learning
// curves replayed from a table.
type Curves interface {
	// Config returns the table's configuration of a trial's hyperparameters.
	Config(hp map[string]any) (int, error)
	// Steps returns how many steps the trial trains.
	Steps(hp map[string]any) int
	// StepTime returns how long step (1-based) of configuration cfg takes.
	StepTime(cfg, step int) time.Duration
	// Value returns the objective at the end of step.
	Value(cfg, step int) float64
}

// Pool is one capacity pool of the simulated backend.
type Pool struct {
	*capacity.Pool
	// Availability is when a spot pool's capacity can be had; nil means
	// always (an on-demand pool).
	Availability backend.Availability
}

// Config configures a Backend.
type Config struct {
	Clock  *clock.Fake
	Curves Curves
	// Metric is the objective's name in the trials' reports.
	Metric string
	// Pools in order; the first is the default pool.
	Pools []Pool
	// SaveOnStop means trials checkpoint when told to stop (SIGTERM, a
	// reclaim's warning included) and keep the step under way; otherwise
	// they checkpoint only with each step's report and lose the step under
	// way.
	SaveOnStop bool
}

// Report is one report a simulated trial makes: the driver hands it to the
// control loop (Controller.Report) and gives the decision back (Decided).
type Report struct {
	AttemptID int64
	Step      int64
	Metrics   map[string]float64
	// Final says the trial trained its last step: it exits 0 once the
	// report is acknowledged.
	Final bool
}

// Errors.
var (
	ErrUnknownPool = errors.New("unknown pool")
)

// Backend is the simulated backend. Its methods are safe for concurrent use;
// what it emits depends only on the calls made and the clock's times.
type Backend struct {
	cfg Config

	mu       sync.Mutex
	pools    []*pool
	attempts map[int64]*attempt
	pending  timerHeap
	seq      uint64
	out      []backend.Event
	reports  []Report
	events   chan backend.Event // never sent on: the driver takes events with TakeEvents
	closed   bool
	// Preemptions counts the attempts reclaimed.
	preemptions int
	// lost and moved are the progress thrown away by reclaims and by
	// other stops (the steps under way when they came).
	lost, moved time.Duration
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Pooled  = (*Backend)(nil)
	_ backend.Sizer   = (*Backend)(nil)
)

type pool struct {
	Pool
	idx      int
	capacity virga.Resources
	used     virga.Resources
	up       bool
	next     time.Time // next availability change (zero: never)
	warned   bool      // the warning of the reclaim at next was given
}

// attempt is one simulated trial process.
type attempt struct {
	spec    *backend.StartSpec
	pool    *pool
	cfg     int
	steps   int
	step    int           // steps done (from the restored checkpoint on)
	kept    time.Duration // progress into step+1 restored from a checkpoint
	runFrom time.Time     // when the step under way began making progress
	dir     string        // VIRGA_CHECKPOINT_DIR
	gen     int           // bumps invalidate its timers
	waiting bool          // a report is out, its decision not yet back
	ended   bool
}

// timer kinds, in the order timers due at one instant run.
const (
	tRun = iota
	tStep
	tPool
)

type timer struct {
	at   time.Time
	kind int
	id   int64 // attempt, or pool index
	gen  int
	seq  uint64
}

type timerHeap []timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	// By attempt, not by when Start was called: the loop starts its
	// attempts concurrently.
	if h[i].id != h[j].id {
		return h[i].id < h[j].id
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)   { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}

// New returns a simulated backend whose pools are as of the clock's time.
func New(cfg Config) (*Backend, error) {
	switch {
	case cfg.Clock == nil:
		return nil, errors.New("sim backend: no clock")
	case cfg.Curves == nil:
		return nil, errors.New("sim backend: no curves")
	case len(cfg.Pools) == 0:
		return nil, errors.New("sim backend: no pools")
	}
	b := &Backend{cfg: cfg, attempts: map[int64]*attempt{}, events: make(chan backend.Event)}
	now := cfg.Clock.Now()
	for i, p := range cfg.Pools {
		n := max(p.MaxNodes, 1)
		sp := &pool{Pool: p, idx: i, up: true,
			capacity: virga.Resources{CPU: p.Node.CPU * float64(n), MemoryMB: p.Node.MemoryMB * int64(n), GPU: p.Node.GPU * n}}
		b.pools = append(b.pools, sp)
		b.poolChanged(sp, now)
	}
	return b, nil
}

// Name returns "sim".
func (b *Backend) Name() string { return "sim" }

// Events returns a channel that never delivers: the driver takes the events
// with TakeEvents and hands them to the loop in the pass it chooses.
func (b *Backend) Events() <-chan backend.Event { return b.events }

// Close closes the events channel.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		close(b.events)
	}
	return nil
}

// Free returns what the pools that are up leave free.
func (b *Backend) Free() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	var free virga.Resources
	for _, p := range b.pools {
		if p.up {
			free = free.Add(p.capacity.Sub(p.used))
		}
	}
	return free
}

// Capacity returns the pools' total.
func (b *Backend) Capacity() virga.Resources {
	var c virga.Resources
	for _, p := range b.pools {
		c = c.Add(p.capacity)
	}
	return c
}

// Pools returns the pools' status.
func (b *Backend) Pools() []backend.PoolStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]backend.PoolStatus, len(b.pools))
	for i, p := range b.pools {
		out[i] = backend.PoolStatus{Name: p.Name, Capacity: p.capacity, Free: p.capacity.Sub(p.used),
			Preemptible: p.Availability != nil, Up: p.up, Next: p.next, Warning: p.Warning}
	}
	return out
}

// Preemptions returns how many attempts were reclaimed.
func (b *Backend) Preemptions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.preemptions
}

// Thrown returns the progress thrown away: by reclaims (lost) and by the
// loop's stops (moved), the parts of steps under way that no checkpoint kept.
func (b *Backend) Thrown() (lost, moved time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lost, b.moved
}

func (b *Backend) at(t time.Time, kind int, id int64, gen int) {
	b.seq++
	heap.Push(&b.pending, timer{at: t, kind: kind, id: id, gen: gen, seq: b.seq})
}

// Start reserves the attempt's resources on its pool and starts it: Started
// is emitted at once, and it makes progress once the pool's restart
// overhead has passed. A pool that is down, or too full, refuses with
// ErrNoCapacity.
func (b *Backend) Start(_ context.Context, s *backend.StartSpec) error {
	var hp map[string]any
	if err := json.Unmarshal([]byte(s.Env["VIRGA_HPARAMS"]), &hp); err != nil {
		return fmt.Errorf("sim backend: attempt %d: hyperparameters: %w", s.AttemptID, err)
	}
	cfg, err := b.cfg.Curves.Config(hp)
	if err != nil {
		return fmt.Errorf("sim backend: attempt %d: %w", s.AttemptID, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.attempts[s.AttemptID]; ok {
		return fmt.Errorf("sim backend: attempt %d started twice", s.AttemptID)
	}
	p := b.pools[0]
	if s.Pool != "" {
		i := slices.IndexFunc(b.pools, func(p *pool) bool { return p.Name == s.Pool })
		if i < 0 {
			return fmt.Errorf("sim backend: pool %q: %w", s.Pool, ErrUnknownPool)
		}
		p = b.pools[i]
	}
	if !p.up || !s.Resources.Fits(p.capacity.Sub(p.used)) {
		return fmt.Errorf("sim backend: pool %s: %w", p.Name, virga.ErrNoCapacity)
	}
	p.used = p.used.Add(s.Resources)
	a := &attempt{spec: s, pool: p, cfg: cfg, steps: b.cfg.Curves.Steps(hp), dir: s.Env["VIRGA_CHECKPOINT_DIR"]}
	a.step, a.kept = restored(s.Checkpoint)
	b.attempts[s.AttemptID] = a
	// Started at once: the attempt holds its node, billed, from now (a
	// cloud bills a node from when it is asked for); it makes progress
	// once the pool's restart overhead has passed.
	now := b.cfg.Clock.Now()
	a.runFrom = now.Add(p.RestartOverhead)
	b.out = append(b.out, backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: now, PID: int(s.AttemptID), Pool: p.Name})
	if a.step < a.steps {
		// Nothing shows the end of the overhead (no report, no event, as
		// for a live trial): the first thing due is its step's end.
		b.scheduleStep(a, a.runFrom)
	} else {
		b.at(a.runFrom, tRun, s.AttemptID, a.gen)
	}
	if p.warned {
		// Its pool's reclaim is announced: told to stop at once.
		b.terminate(a, now, true)
	}
	return nil
}

// Stop sends SIGTERM: the trial saves its progress if it checkpoints on
// stop and exits at once.
func (b *Backend) Stop(attemptID int64, _ time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.attempts[attemptID]
	if a == nil || a.ended {
		return nil
	}
	b.terminate(a, b.cfg.Clock.Now(), false)
	return nil
}

// terminate ends a: SIGTERM now (it saves first when trials save on stop).
func (b *Backend) terminate(a *attempt, now time.Time, preempted bool) {
	if !b.cfg.SaveOnStop && !a.waiting {
		if d := now.Sub(a.runFrom); d > 0 && preempted {
			b.lost += d
		} else if d > 0 {
			b.moved += d
		}
	}
	if b.cfg.SaveOnStop && !a.waiting {
		if d := now.Sub(a.runFrom); d > 0 {
			a.kept += d
			b.save(a)
			// Reported before it exits, so that the loop records it.
			b.reports = append(b.reports, Report{AttemptID: a.spec.AttemptID, Step: int64(a.step),
				Metrics: map[string]float64{ProgressMetric: a.kept.Seconds()}})
		}
	}
	b.exit(a, backend.Event{Signal: "terminated", Preempted: preempted}, now)
}

// exit ends a with ev (its kind, attempt, time and pool filled in here).
func (b *Backend) exit(a *attempt, ev backend.Event, now time.Time) {
	a.ended = true
	a.gen++
	a.pool.used = a.pool.used.Sub(a.spec.Resources)
	delete(b.attempts, a.spec.AttemptID)
	ev.AttemptID, ev.Kind, ev.Time, ev.Pool = a.spec.AttemptID, backend.Exited, now, a.pool.Name
	if ev.Preempted {
		b.preemptions++
		ev.Message = "preempted: pool " + a.pool.Name + " reclaimed its capacity"
	}
	b.out = append(b.out, ev)
}

// Next returns when the backend next has something to do (zero: nothing
// scheduled); the clock's time when events or reports are waiting.
func (b *Backend) Next() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.out) > 0 || len(b.reports) > 0 {
		return b.cfg.Clock.Now()
	}
	for len(b.pending) > 0 {
		t := b.pending[0]
		if t.kind != tPool {
			if a := b.attempts[t.id]; a == nil || a.gen != t.gen {
				heap.Pop(&b.pending) // stale
				continue
			}
		}
		return t.at
	}
	return time.Time{}
}

// Advance runs what falls due by the clock's time: attempts that start,
// steps that end (each making a report, see TakeReports) and pool changes.
func (b *Backend) Advance() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.cfg.Clock.Now()
	for len(b.pending) > 0 && !b.pending[0].at.After(now) {
		t := heap.Pop(&b.pending).(timer)
		if t.kind == tPool {
			b.poolChanged(b.pools[t.id], t.at)
			continue
		}
		a := b.attempts[t.id]
		if a == nil || a.gen != t.gen {
			continue
		}
		switch t.kind {
		case tRun:
			b.scheduleStep(a, t.at)
		case tStep:
			a.step++
			a.kept = 0
			a.runFrom = t.at
			a.waiting = true
			b.save(a)
			b.reports = append(b.reports, Report{AttemptID: t.id, Step: int64(a.step),
				Metrics: map[string]float64{b.cfg.Metric: b.cfg.Curves.Value(a.cfg, a.step)}, Final: a.step >= a.steps})
		}
	}
}

func (b *Backend) scheduleStep(a *attempt, from time.Time) {
	if a.step >= a.steps {
		// Restored at its last step: nothing left to train.
		b.exit(a, backend.Event{ExitCode: new(int)}, from)
		return
	}
	left := max(b.cfg.Curves.StepTime(a.cfg, a.step+1)-a.kept, 0)
	b.at(from.Add(left), tStep, a.spec.AttemptID, a.gen)
}

// TakeReports returns the reports made since the last call, in the order
// the steps ended.
func (b *Backend) TakeReports() []Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.reports
	b.reports = nil
	return r
}

// TakeEvents returns the events emitted since the last call, in order.
func (b *Backend) TakeEvents() []backend.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.out
	b.out = nil
	// Attempts the loop starts concurrently may emit at one instant in
	// any order: put them in attempt order (one attempt's stay in order).
	slices.SortStableFunc(e, func(x, y backend.Event) int {
		if c := x.Time.Compare(y.Time); c != 0 {
			return c
		}
		return int(x.AttemptID - y.AttemptID)
	})
	return e
}

// Decided gives a report's answer back to its trial: it goes on to its next
// step, exits 0 after its last, or (stopped or paused by the loop, which
// then calls Stop) has exited already. err is the report's error: a
// superseded attempt exits.
func (b *Backend) Decided(r Report, stop bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.attempts[r.AttemptID]
	if a == nil || a.ended {
		return
	}
	a.waiting = false
	now := b.cfg.Clock.Now()
	switch {
	case err != nil:
		b.exit(a, backend.Event{ExitCode: ptr(1), Message: "report failed: " + err.Error()}, now)
	case stop:
		b.exit(a, backend.Event{ExitCode: ptr(0)}, now)
	case r.Final:
		b.exit(a, backend.Event{ExitCode: ptr(0)}, now)
	default:
		b.scheduleStep(a, now)
	}
}

func ptr(i int) *int { return &i }

// poolChanged reads p's availability at t: a reclaim's warning terminates
// its attempts; its going down refuses starts until it is up again.
func (b *Backend) poolChanged(p *pool, t time.Time) {
	if p.Availability == nil {
		return
	}
	up, next := p.Availability.Up(t)
	if !next.IsZero() && !next.After(t) {
		next = t.Add(time.Nanosecond)
	}
	if p.up && !up {
		// Down: whatever still runs (a warning of 0) is killed now.
		b.reclaim(p, t)
	}
	p.up, p.next, p.warned = up, next, false
	if next.IsZero() {
		return
	}
	warnAt := next
	if up {
		warnAt = next.Add(-p.Warning)
		if !warnAt.After(t) {
			p.warned = true
			b.reclaim(p, t)
			warnAt = next
		}
	}
	b.at(warnAt, tPool, int64(p.idx), 0)
}

// reclaim terminates every attempt on p, as preempted.
func (b *Backend) reclaim(p *pool, t time.Time) {
	ids := make([]int64, 0)
	for id, a := range b.attempts {
		if a.pool == p && !a.ended {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		b.terminate(b.attempts[id], t, true)
	}
}

// save writes the trial's progress into its checkpoint directory, as a
// trial process saves its checkpoint, for the loop to record with the next
// report.
func (b *Backend) save(a *attempt) {
	if a.dir == "" {
		return
	}
	_ = os.MkdirAll(a.dir, 0o755)
	_ = os.WriteFile(filepath.Join(a.dir, ckptFile), []byte(strconv.Itoa(a.step)+" "+strconv.FormatInt(int64(a.kept), 10)), 0o644)
}

// ProgressMetric is what a trial that saves on stop reports with the
// checkpoint of a step it had not finished: the seconds of it done.
const ProgressMetric = "sim_step_progress"

// ckptFile is the simulated trial's checkpoint.
const ckptFile = "progress"

// restored reads the progress a checkpoint ID names (see Checkpoints).
func restored(id string) (step int, kept time.Duration) {
	_, rest, ok := strings.Cut(id, "@")
	if !ok {
		return 0, 0
	}
	s, k, _ := strings.Cut(rest, "+")
	step, _ = strconv.Atoi(s)
	n, _ := strconv.ParseInt(k, 10, 64)
	return step, time.Duration(n)
}
