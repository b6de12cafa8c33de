package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/agent"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/clock"
)

// ErrNoCapacity is returned (wrapped) by Start when the attempt's resources do
// not fit in what is free; it wraps virga.ErrNoCapacity.
var ErrNoCapacity = fmt.Errorf("local backend: %w", virga.ErrNoCapacity)

// Config configures a local Backend. The zero value is usable.
type Config struct {
	// Capacity is what the backend may hand out. Zero means this machine:
	// runtime.NumCPU cores, MemTotal from /proc/meminfo, no GPUs. It is
	// ignored when Pools are set.
	Capacity virga.Resources
	// Pools, if set, split what the backend hands out into named pools, in
	// this order (the first is the default: StartSpec.Pool empty), some of
	// which may emulate spot capacity (see Pool). With none, the backend
	// has one unnamed pool of Capacity, always up.
	Pools []Pool
	// ShimCommand runs the shim; the shim's flags and the trial's argv are
	// appended. Default: [os.Executable(), "shim"].
	ShimCommand []string
	// GangCommand launches a trial of several processes (StartSpec.Nodes x
	// ProcessesPerNode, all on this machine) with PyTorch's rendezvous
	// variables; `PROCESSES MASTER_PORT GRACE_SECONDS -- ARGV...` is
	// appended. Default: [os.Executable(), "gang"] (agent.GangMain).
	GangCommand []string
	// Clock is the backend's time: event times, the pools' availability
	// and the grace a Stop gives before its SIGKILL; nil means the real
	// clock. What is written for other processes (the shim's stop file, the
	// preemption record a later server reads) is converted to the wall clock.
	Clock clock.Clock
	// PollInterval is how often an adopted attempt's lock is tried to learn
	// that its shim ended. Default 100ms.
	PollInterval time.Duration
	// WarmShims is how many idle shims are kept started and initialised, so
	// that Start hands the attempt to one through a pipe instead of executing
	// a shim (which takes milliseconds: a large binary and a Go runtime).
	// 0 means 2; a negative number means none (every Start executes a shim).
	// A shim whose attempt is over is kept for the next one while fewer than
	// twice WarmShims are idle (with none, it exits).
	WarmShims int
	// ShimDrain is how long a shim lets the rest of a trial's process group
	// run on after the trial's own process ended (a wrapper such as `go run`
	// or `sh -c` may end before the process doing the work, e.g. writing a
	// checkpoint on SIGTERM) before it kills the group. 0 means
	// DefaultShimDrain; a negative value means no drain. A Stop's SIGKILL at
	// the end of its grace reaches the whole group regardless.
	ShimDrain time.Duration
}

// Backend runs attempts as processes on this machine, each under a `virga
// shim`. It implements backend.Backend, backend.Adopter, backend.Sizer and
// backend.Pooled.
type Backend struct {
	acct   *backend.Pools // the pools' bookkeeping, guarded by mu
	pools  []*capPool     // in acct's order; fixed after New, their state guarded by mu
	named  bool           // pools were configured
	shim   []string
	gang   []string
	clock  clock.Clock
	now    func() time.Time // clock.Now
	poll   time.Duration
	warm   int
	drain  time.Duration // handed to each shim
	refill chan struct{} // wakes refillLoop
	q      *backend.EventQueue

	ctx    context.Context // cancelled by Close: adopted watchers stop
	cancel context.CancelFunc
	wg     sync.WaitGroup // adopted watchers and refillLoop

	mu       sync.Mutex
	attempts map[int64]*attempt // running or adopted, until their Exited
	seen     map[int64]bool     // every attempt started or adopted here: none starts again
	held     []*os.File         // locks of attempts declared over without an exit.json, released by Close
	idle     []*warmShim        // warm shims waiting for an attempt
	closed   bool
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Adopter = (*Backend)(nil)
	_ backend.Sizer   = (*Backend)(nil)
	_ backend.Pooled  = (*Backend)(nil)
)

// attempt is the backend's record of one running or adopted attempt. id and
// dir are fixed; the other fields are guarded by Backend.mu.
type attempt struct {
	id   int64
	dir  string
	res  virga.Resources
	pool *capPool // where res is reserved

	pid  int  // the trial's pid (= its process group id); 0 until known
	done bool // Exited was decided; never signal again

	stopAsked  bool          // Stop came before the pid was known
	stopGrace  time.Duration // the shortest grace asked before the pid was known
	termSent   bool
	killAt     time.Time // the backend's clock
	killTimer  clock.Timer
	killIssued bool

	// preempted: its pool's reclaim was announced to it (PreemptFile
	// written); it is killed at preemptKillAt (the backend's clock).
	preempted     bool
	preemptKillAt time.Time
}

// New returns a backend with cfg's defaults filled in.
func New(cfg Config) (*Backend, error) {
	b := &Backend{
		shim:     cfg.ShimCommand,
		gang:     cfg.GangCommand,
		clock:    clock.Or(cfg.Clock),
		poll:     cfg.PollInterval,
		attempts: make(map[int64]*attempt),
		seen:     make(map[int64]bool),
	}
	capacity := cfg.Capacity
	if capacity == (virga.Resources{}) && len(cfg.Pools) == 0 {
		mem, err := memTotalMB()
		if err != nil {
			return nil, fmt.Errorf("local backend: detecting capacity: %w", err)
		}
		capacity = virga.Resources{CPU: float64(runtime.NumCPU()), MemoryMB: mem}
	}
	if err := b.newPools(cfg.Pools, capacity); err != nil {
		return nil, err
	}
	if len(b.shim) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local backend: finding the shim: %w", err)
		}
		b.shim = []string{exe, "shim"}
	}
	b.shim = append([]string(nil), b.shim...)
	if len(b.gang) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local backend: finding the gang launcher: %w", err)
		}
		b.gang = []string{exe, "gang"}
	}
	b.now = b.clock.Now
	if b.poll <= 0 {
		b.poll = 100 * time.Millisecond
	}
	switch {
	case cfg.ShimDrain == 0:
		b.drain = DefaultShimDrain
	case cfg.ShimDrain > 0:
		b.drain = cfg.ShimDrain
	}
	switch {
	case cfg.WarmShims == 0:
		b.warm = 2
	case cfg.WarmShims > 0:
		b.warm = cfg.WarmShims
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.q = backend.NewEventQueue()
	b.startEmulation()
	if b.warm > 0 {
		b.refill = make(chan struct{}, 1)
		b.wg.Add(1)
		go b.refillLoop()
		b.askRefill()
	}
	return b, nil
}

// memTotalMB reads MemTotal from /proc/meminfo, in MiB.
func memTotalMB() (int64, error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc/meminfo: unexpected MemTotal line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/meminfo: MemTotal: %w", err)
		}
		return kb / 1024, nil
	}
	return 0, errors.New("/proc/meminfo: no MemTotal line")
}

// Name returns "local".
func (b *Backend) Name() string { return "local" }

// Events returns the channel of Started and Exited events. Events are queued
// without bound, so watchers never wait for the reader; the channel is closed
// by Close, and events not yet delivered then are dropped (the next server
// adopts the attempts and learns their state again).
//
// A started attempt gets Started (with the trial's pid) once the shim has
// started the trial, then Exited. An attempt whose trial never started (the
// shim could not run, or the directory was locked) gets only Exited.
func (b *Backend) Events() <-chan backend.Event { return b.q.Out() }

// Free returns the capacity not reserved by running or adopted attempts,
// summed over the pools that are up (Pools tells each pool's). It can be
// negative in a dimension when adopted attempts overcommit it.
func (b *Backend) Free() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Free()
}

// Capacity returns the total resources the backend can ever offer
// (Config.Capacity, or this machine's, or the sum of the pools'), whatever
// runs.
func (b *Backend) Capacity() virga.Resources {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.acct.Capacity()
}

// Start reserves the attempt's resources and hands the attempt to a warm
// shim, or launches one; it returns without waiting for the trial. An empty
// s.Workdir means this process's working directory; an empty s.Pool, the
// default pool. Started follows when the shim reports the trial's pid;
// Exited follows when the shim ends. Start returns an error wrapping
// ErrNoCapacity if the resources do not fit in the pool's free capacity or
// the pool is down, and one wrapping
// virga.ErrConflict if the attempt runs or ran here (started or adopted) or
// its directory records an earlier run. A trial that cannot be executed (no such command, bad
// workdir) is not a Start error: it ends with exit code 127 and a Message.
func (b *Backend) Start(ctx context.Context, s *backend.StartSpec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("starting attempt: %w", err)
	}
	if s == nil || len(s.Argv) == 0 || !filepath.IsAbs(s.Dir) {
		return errors.New("starting attempt: the spec needs an argv and an absolute Dir")
	}
	if s.Workdir == "" {
		// The trial runs where this server runs, whichever shim it gets.
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("starting attempt %d: no Workdir, and this process's: %w", s.AttemptID, err)
		}
		cp := *s
		cp.Workdir = wd
		s = &cp
	} else if !filepath.IsAbs(s.Workdir) {
		return fmt.Errorf("starting attempt %d: Workdir %q is not absolute", s.AttemptID, s.Workdir)
	}
	if n := max(s.Nodes, 1) * max(s.ProcessesPerNode, 1); n > 1 {
		// A gang on one machine: its nodes' processes all run here, under
		// one launcher that ends them together.
		cp := *s
		cp.Argv = append(append(slices.Clone(b.gang), strconv.Itoa(n), strconv.Itoa(agent.MasterPort(s.AttemptID)),
			strconv.Itoa(int(max(s.StopGrace, time.Second)/time.Second)), "--"), s.Argv...)
		s = &cp
	}
	if _, err := os.Stat(filepath.Join(s.Dir, ExitFile)); err == nil {
		return fmt.Errorf("starting attempt %d: %s exists, the attempt already ran: %w", s.AttemptID, filepath.Join(s.Dir, ExitFile), virga.ErrConflict)
	}

	p, err := b.poolNamed(s.Pool)
	if err != nil {
		return fmt.Errorf("starting attempt %d: %w", s.AttemptID, err)
	}

	// 1. Reserve in the pool, and apply a reclaim under way.
	a := &attempt{id: s.AttemptID, dir: s.Dir, res: s.Resources, pool: p}
	b.mu.Lock()
	switch free := p.Free(); {
	case b.closed:
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: the local backend is closed", s.AttemptID)
	case b.attempts[s.AttemptID] != nil:
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: already running: %w", s.AttemptID, virga.ErrConflict)
	case b.seen[s.AttemptID]:
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: it ran here already: %w", s.AttemptID, virga.ErrConflict)
	case !p.Up():
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: %w", s.AttemptID, downError(p))
	case !s.Resources.Fits(free):
		b.mu.Unlock()
		in := ""
		if b.named {
			in = " in pool " + p.Name
		}
		return fmt.Errorf("starting attempt %d: needs %s, free%s %s: %w", s.AttemptID, fmtRes(s.Resources), in, fmtRes(free), ErrNoCapacity)
	}
	p.Reserve(s.Resources)
	b.attempts[s.AttemptID] = a
	b.seen[s.AttemptID] = true
	b.mu.Unlock()
	if b.named {
		writePoolFile(s.Dir, p.Name)
	}
	b.mu.Lock()
	b.joinPoolLocked(a, p) // after the pool file: it may write PreemptFile
	b.mu.Unlock()

	// 2. Hand it to a warm shim, or launch one.
	w, err := b.launchWarmFor(s)
	if err == nil && w == nil {
		w, err = b.launch(s)
	}
	if err != nil {
		b.mu.Lock()
		p.Release(s.Resources)
		delete(b.attempts, s.AttemptID)
		delete(b.seen, s.AttemptID) // it never ran: it may be started again
		a.done = true
		b.mu.Unlock()
		return fmt.Errorf("starting attempt %d: %w", s.AttemptID, err)
	}
	go b.watchChild(a, w)
	return nil
}

// launch starts a shim for s and hands it s as a warm shim is handed an
// attempt (the spec on stdin: the report token never appears on a command
// line or in an environment); it returns the shim.
func (b *Backend) launch(s *backend.StartSpec) (*warmShim, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the attempt directory: %w", err)
	}
	msg, err := b.shimSpecFor(s)
	if err != nil {
		return nil, err
	}
	// The shim's own stdout and stderr (messages before it opens the log)
	// go to the log too; never to a pipe to this server, which may die.
	logf, err := os.OpenFile(filepath.Join(s.Dir, OutputFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the output log: %w", err)
	}
	defer logf.Close()
	w, err := b.startShim(s.Dir, logf)
	if err != nil {
		return nil, err
	}
	if err := w.hand(msg); err != nil {
		return nil, fmt.Errorf("handing the attempt to the shim: %w", err)
	}
	return w, nil
}

// trialEnv is the trial's environment: this process's, then s.Env.
func trialEnv(s *backend.StartSpec) []string {
	env := os.Environ()
	for k, v := range s.Env {
		env = append(env, k+"="+v) // later entries win (exec.Cmd dedups)
	}
	return env
}

// watchChild follows the attempt a shim this backend launched runs: Started
// when the trial's pid arrives on the pipe (timed when the shim started the
// trial, not when the pipe was read: a short trial may have ended by then),
// Exited when the shim says the attempt is over (it recorded the end and
// released the attempt's lock; the shim is then reused) or ends. After
// Close it still reaps the shim but emits nothing.
func (b *Backend) watchChild(a *attempt, w *warmShim) {
	line, err := w.lines.ReadString('\n')
	if pid, at, ok := parsePIDLine(line); ok {
		t := b.now()
		if !at.IsZero() {
			t = b.observed(at)
		}
		b.started(a, pid, t)
		line, err = w.lines.ReadString('\n')
	}
	if err == nil && line == endLine {
		if rec, err := readExitRecord(a.dir); err == nil {
			b.finish(a, b.exitEvent(a.id, rec))
			b.reuse(w)
			return
		}
	}
	// The shim ended (or said the attempt is over without a record of its
	// end: then it is sent away, and its status tells).
	cmd := w.cmd
	w.specW.Close()
	w.pidR.Close()
	_ = cmd.Wait() // the status is in ProcessState
	ev := b.shimExitEvent(a, cmd.ProcessState)
	if _, err := os.Stat(filepath.Join(a.dir, ExitFile)); errors.Is(err, fs.ErrNotExist) {
		// Our shim died without recording the end (or refused: then shim.json
		// names another shim, and we leave its trial alone).
		if rec, err := readShimRecord(a.dir); err == nil && rec.ShimPID == cmd.Process.Pid {
			ev.Message += killLeftovers(a.dir)
		}
	}
	b.finish(a, ev)
}

// shimExitEvent is the Exited event of an attempt whose shim ended with st.
func (b *Backend) shimExitEvent(a *attempt, st *os.ProcessState) backend.Event {
	rec, err := readExitRecord(a.dir)
	if err == nil {
		return b.exitEvent(a.id, rec)
	}
	now := b.now()
	switch {
	case st.ExitCode() == ShimExitLocked:
		return lostEvent(a.id, now, "the attempt's directory is owned by another shim or server; the trial was not started")
	case errors.Is(err, fs.ErrNotExist):
		return lostEvent(a.id, now, fmt.Sprintf("the shim ended (%s) without recording the trial's exit; see %s", st, filepath.Join(a.dir, OutputFile)))
	default:
		return lostEvent(a.id, now, fmt.Sprintf("the shim ended (%s): %v", st, err))
	}
}

// started records the trial's pid, emits Started, and applies a Stop that
// came before the pid was known.
func (b *Backend) started(a *attempt, pid int, t time.Time) {
	b.mu.Lock()
	if a.done || a.pid != 0 {
		b.mu.Unlock()
		return
	}
	a.pid = pid
	b.q.Push(backend.Event{AttemptID: a.id, Kind: backend.Started, Time: t, PID: pid, Pool: b.poolName(a)})
	// The group may be gone already.
	if a.stopAsked {
		_ = b.stopLocked(a, b.now().Add(a.stopGrace))
	}
	if a.preempted {
		_ = b.stopLocked(a, a.preemptKillAt)
	}
	b.mu.Unlock()
}

// poolName is the name of a's pool, "" without named pools.
func (b *Backend) poolName(a *attempt) string {
	if a.pool == nil {
		return ""
	}
	return a.pool.Name
}

// finish releases the attempt's resources, forgets it and emits ev (its
// Exited event, marked Preempted if the attempt was). Resources are released
// before the event so that a reader reacting to it finds them free.
func (b *Backend) finish(a *attempt, ev backend.Event) {
	b.mu.Lock()
	if a.done {
		b.mu.Unlock()
		return
	}
	a.done = true
	if a.killTimer != nil {
		a.killTimer.Stop()
	}
	if a.pool != nil {
		a.pool.Release(a.res)
	}
	if b.attempts[a.id] == a {
		delete(b.attempts, a.id)
	}
	ev.Preempted = ev.Preempted || a.preempted
	ev.Pool = b.poolName(a)
	if ev.Preempted && !ev.Lost {
		ev.Message = strings.TrimPrefix(ev.Message+"; ", "; ") + "preempted: pool " + ev.Pool + " reclaimed its capacity"
	}
	b.q.Push(ev)
	b.mu.Unlock()
}

// Stop sends SIGTERM to the attempt's process group now and SIGKILL after
// grace (at once if grace <= 0). It returns at once; Exited follows. It is
// idempotent: a later Stop never sends SIGTERM again and can only bring the
// SIGKILL closer. Stopping an attempt this backend does not run (it ended, or
// was never started or adopted here) is not an error.
func (b *Backend) Stop(attemptID int64, grace time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.attempts[attemptID]
	if a == nil || a.done {
		return nil
	}
	grace = max(grace, 0)
	if a.pid == 0 {
		if !a.stopAsked || grace < a.stopGrace {
			a.stopAsked, a.stopGrace = true, grace
		}
		return nil
	}
	if err := b.stopLocked(a, b.now().Add(grace)); err != nil {
		return fmt.Errorf("stopping attempt %d: %w", attemptID, err)
	}
	return nil
}

// stopLocked sends SIGTERM to a's group (unless it was sent already) and
// SIGKILL at killAt (the backend's clock; at once if it is past); a later call can
// only bring the SIGKILL closer. b.mu is held and a.pid is known.
func (b *Backend) stopLocked(a *attempt, killAt time.Time) error {
	if a.killIssued {
		return nil
	}
	if a.termSent && !a.killAt.IsZero() && !killAt.Before(a.killAt) {
		return nil
	}
	if a.killTimer != nil {
		a.killTimer.Stop()
		a.killTimer = nil
	}
	a.killAt = killAt
	grace := killAt.Sub(b.now())
	if grace <= 0 {
		a.termSent, a.killIssued = true, true
		return signalGroup(a.pid, unix.SIGKILL)
	}
	if !a.termSent {
		a.termSent = true
		// Tell the shim how long the group may take to end, in case the
		// trial's own process (a wrapper) exits before the rest of it.
		stop := []byte(strconv.FormatInt(b.wall(killAt).UnixNano(), 10) + "\n")
		// Best effort: without it a wrapped trainer gets the shim's drain time.
		_ = os.WriteFile(filepath.Join(a.dir, StopFile), stop, 0o644)
		if err := signalGroup(a.pid, unix.SIGTERM); err != nil {
			return err
		}
	}
	a.killTimer = b.clock.AfterFunc(grace, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if a.done || b.closed || a.killIssued || b.now().Before(a.killAt) {
			return
		}
		a.killIssued = true
		_ = signalGroup(a.pid, unix.SIGKILL)
	})
	return nil
}

// wall converts t on the backend's clock to the wall clock, for other
// processes.
func (b *Backend) wall(t time.Time) time.Time {
	if _, ok := b.clock.(clock.Real); ok {
		return t
	}
	return time.Now().Add(t.Sub(b.now()))
}

// observed is the time of an event that a shim recorded at t on the wall
// clock: t itself on the real clock (when it happened, not when the
// backend learnt it: a trial's start read late from the pipe would
// otherwise come after its end), and now on an injected clock, which times
// every event when the backend observes it.
func (b *Backend) observed(t time.Time) time.Time {
	if _, ok := b.clock.(clock.Real); ok {
		return t
	}
	return b.now()
}

// fromWall converts t on the wall clock to the backend's clock.
func (b *Backend) fromWall(t time.Time) time.Time {
	if _, ok := b.clock.(clock.Real); ok {
		return t
	}
	return b.now().Add(time.Until(t))
}

// signalGroup signals the process group led by pid; if the trial left that
// group, the trial itself. A group that is already gone is not an error.
func signalGroup(pid int, sig unix.Signal) error {
	err := unix.Kill(-pid, sig)
	if errors.Is(err, unix.ESRCH) {
		err = unix.Kill(pid, sig)
	}
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("sending %s to process group %d: %w", unix.SignalName(sig), pid, err)
	}
	return nil
}

// Close stops watching attempts and closes the Events channel; it does not
// signal any trial, and cancels pending SIGKILLs of Stop. Idle warm shims
// are sent away. Shims this
// backend launched are still reaped when they end. Locks still held (those of
// attempts declared over whose exit.json could not be written) are released.
// Close is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for _, a := range b.attempts {
		if a.killTimer != nil {
			a.killTimer.Stop()
		}
	}
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	held, idle := b.held, b.idle
	b.held, b.idle = nil, nil
	b.mu.Unlock()
	for _, w := range idle {
		w.release()
	}
	var errs []error
	for _, f := range held {
		if err := f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("releasing %s: %w", f.Name(), err))
		}
	}
	b.q.Close()
	return errors.Join(errs...)
}

// fmtRes formats resources for messages.
func fmtRes(r virga.Resources) string {
	return fmt.Sprintf("%s cpu, %d MiB, %d gpu", strconv.FormatFloat(r.CPU, 'g', -1, 64), r.MemoryMB, r.GPU)
}
