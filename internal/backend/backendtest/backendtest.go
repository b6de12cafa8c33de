// Package backendtest is the conformance suite of backend.Backend: one body
// of tests that each backend's own tests run against a real instance of it
// (real trial processes; the real Slurm test cluster). It checks the
// contract written in package backend, and nothing of how a backend works
// inside; it never mocks the processes it runs.
package backendtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// Harness is what the suite needs of a backend under test.
type Harness struct {
	// New returns a new instance of the backend. Instances of one Harness
	// share what they run: a later one can adopt what an earlier one
	// started. The suite closes every instance it makes (t's cleanup closes
	// it too, in case the test fails first).
	New func(t *testing.T) backend.Backend
	// Unit is what each of the suite's attempts asks for (per node): small,
	// a few of them fill the default pool, and one fits every pool.
	Unit virga.Resources
	// Caps declares the features of the contract the backend has.
	Caps Caps
	// Spot, if set, returns an instance with a preemptible pool named
	// "spot" that is up until reclaimAt and down for good after it, whose
	// attempts are warned (SIGTERM) warning before the reclaim. Nil
	// declares that the backend does not emulate spot availability.
	Spot func(t *testing.T, reclaimAt time.Time, warning time.Duration) backend.Backend
	// Wait is the longest the suite waits for an event; default 15 s.
	Wait time.Duration
}

// Caps are the features a backend declares; the suite checks each one
// declared, and for one not declared checks the weaker promise it falls
// back to (never nothing).
type Caps struct {
	// PID: Started carries the trial's process ID.
	PID bool
	// Signals: a trial killed by a signal is reported by Exited.Signal (not
	// declared: the exit status 128+N of a shell or container runtime is
	// accepted in its place).
	Signals bool
	// Gang: attempts of several nodes (StartSpec.Nodes > 1) run, all nodes
	// or none. Not declared: Start refuses them with an error.
	Gang bool
	// MinGrace is the shortest grace between SIGTERM and SIGKILL the
	// backend can honour (Kubernetes counts whole seconds); the suite's
	// stops give at least this.
	MinGrace time.Duration
}

// Run runs the suite against h's backend.
func Run(t *testing.T, h Harness) {
	if h.Wait <= 0 {
		h.Wait = 15 * time.Second
	}
	s := &suite{h: h}
	t.Run("ExitCodes", s.exitCodes)
	t.Run("SignalDeath", s.signalDeath)
	t.Run("StopTermThenKill", s.stopTermThenKill)
	t.Run("StopEndedIsNoError", s.stopEnded)
	t.Run("StopRightAfterStart", s.stopAtOnce)
	t.Run("ConcurrentStarts", s.concurrent)
	t.Run("StartTwiceIsAnError", s.startTwice)
	t.Run("CapacityAndFree", s.capacity)
	t.Run("Gang", s.gang)
	t.Run("Pools", s.pools)
	t.Run("Spot", s.spot)
	t.Run("AdoptAndClose", s.adopt)
}

type suite struct {
	h   Harness
	ids atomic.Int64
}

// watcher collects one instance's events, by attempt, until Close; at the
// end of the test it checks that each attempt got at most one Started,
// before its one Exited.
type watcher struct {
	b       backend.Backend
	mu      sync.Mutex
	evs     map[int64][]backend.Event
	changed chan struct{} // closed and replaced at each event
	done    chan struct{}
	closed  bool
}

func (s *suite) open(t *testing.T, b backend.Backend) *watcher {
	t.Helper()
	w := &watcher{b: b, evs: map[int64][]backend.Event{}, changed: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range b.Events() {
			w.mu.Lock()
			w.evs[ev.AttemptID] = append(w.evs[ev.AttemptID], ev)
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.close(t) })
	return w
}

func (s *suite) newBackend(t *testing.T) (backend.Backend, *watcher) {
	t.Helper()
	b := s.h.New(t)
	return b, s.open(t, b)
}

// close closes the instance, waits until its channel is closed and checks
// that every attempt's events came once each, in order.
func (w *watcher) close(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	already := w.closed
	w.closed = true
	w.mu.Unlock()
	if already {
		return
	}
	if err := w.b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Errorf("Close did not close the Events channel within 10s")
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, evs := range w.evs {
		started, exited := 0, 0
		for _, ev := range evs {
			switch ev.Kind {
			case backend.Started:
				started++
				if exited > 0 {
					t.Errorf("attempt %d: Started after Exited: %+v", id, evs)
				}
			case backend.Exited:
				exited++
			default:
				t.Errorf("attempt %d: event of unknown kind %q", id, ev.Kind)
			}
		}
		if n := len(evs); n == 2 && evs[0].Kind == backend.Started && evs[1].Kind == backend.Exited && evs[1].Time.Before(evs[0].Time) {
			t.Errorf("attempt %d: Exited at %s, before its Started at %s", id, evs[1].Time, evs[0].Time)
		}
		if started > 1 || exited > 1 {
			t.Errorf("attempt %d: %d Started and %d Exited events, want at most one each: %+v", id, started, exited, evs)
		}
	}
}

// wait returns the attempt's event of kind, waiting for it.
func (s *suite) wait(t *testing.T, w *watcher, id int64, kind backend.EventKind) backend.Event {
	t.Helper()
	deadline := time.After(s.h.Wait)
	for {
		w.mu.Lock()
		for _, ev := range w.evs[id] {
			if ev.Kind == kind {
				w.mu.Unlock()
				return ev
			}
		}
		changed := w.changed
		evs := append([]backend.Event(nil), w.evs[id]...)
		w.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("attempt %d: no %s event within %s (its events: %+v)", id, kind, s.h.Wait, evs)
		}
	}
}

// events returns what the instance delivered for the attempt so far.
func (w *watcher) events(id int64) []backend.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]backend.Event(nil), w.evs[id]...)
}

// spec is an attempt of Unit per node running script with sh -c; $M is a
// directory of its own for markers, also its working directory.
func (s *suite) spec(t *testing.T, script string) *backend.StartSpec {
	t.Helper()
	dir := t.TempDir()
	sp := &backend.StartSpec{
		AttemptID: s.ids.Add(1), TrialID: 1, ExperimentID: 1,
		Argv: []string{"sh", "-c", script}, Env: map[string]string{"M": dir},
		Workdir: dir, Dir: filepath.Join(dir, "attempt"),
		Resources: s.h.Unit, Nodes: 1, ProcessesPerNode: 1,
		StopGrace: max(2*time.Second, s.h.Caps.MinGrace),
		// Nothing listens there: the suite's trials report nothing.
		Token: "conformance",
	}
	sp.ReportURL = fmt.Sprintf("http://127.0.0.1:9/api/v1/attempts/%d/report", sp.AttemptID)
	if err := os.MkdirAll(sp.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return sp
}

func (s *suite) start(t *testing.T, b backend.Backend, sp *backend.StartSpec) {
	t.Helper()
	if err := b.Start(context.Background(), sp); err != nil {
		t.Fatalf("Start attempt %d: %v", sp.AttemptID, err)
	}
}

// started waits for the attempt's Started event and checks it.
func (s *suite) started(t *testing.T, w *watcher, sp *backend.StartSpec) backend.Event {
	t.Helper()
	ev := s.wait(t, w, sp.AttemptID, backend.Started)
	if s.h.Caps.PID && ev.PID <= 0 {
		t.Errorf("attempt %d: Started without the trial's pid: %+v", sp.AttemptID, ev)
	}
	if ev.Time.IsZero() {
		t.Errorf("attempt %d: Started without a time: %+v", sp.AttemptID, ev)
	}
	return ev
}

// exited waits for the attempt's Exited event and checks that it says how
// the trial ended, Started coming first.
func (s *suite) exited(t *testing.T, w *watcher, sp *backend.StartSpec) backend.Event {
	t.Helper()
	ev := s.wait(t, w, sp.AttemptID, backend.Exited)
	if ev.Time.IsZero() {
		t.Errorf("attempt %d: Exited without a time: %+v", sp.AttemptID, ev)
	}
	if !ev.Lost && (ev.ExitCode == nil) == (ev.Signal == "") {
		t.Errorf("attempt %d: Exited needs one of an exit code and a signal: %+v", sp.AttemptID, ev)
	}
	return ev
}

// marker waits until the trial wrote $M/name, failing at once if w
// reports the attempt over first.
func (s *suite) marker(t *testing.T, w *watcher, sp *backend.StartSpec, name string) {
	t.Helper()
	path := filepath.Join(sp.Env["M"], name)
	waitFor(t, s.h.Wait, "the trial's marker "+path, func() bool {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		for _, ev := range w.events(sp.AttemptID) {
			if ev.Kind == backend.Exited {
				log, _ := os.ReadFile(filepath.Join(sp.Dir, "output.log"))
				t.Fatalf("attempt %d ended before it wrote %s: %+v\noutput.log:\n%s", sp.AttemptID, name, ev, log)
			}
		}
		return false
	})
}

// touch writes $M/name, which a trial may be waiting for.
func touch(t *testing.T, sp *backend.StartSpec, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(sp.Env["M"], name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond every 5 ms until it holds.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Scripts the trials run. waitGo writes $M/ready, then waits for $M/go and
// exits 0; it ends on SIGTERM at once (exit 143).
const (
	waitGo     = `echo > "$M/ready"; while [ ! -e "$M/go" ]; do sleep 0.02; done`
	ignoreTerm = `trap '' TERM; echo > "$M/ready"; while :; do sleep 0.02; done`
	trapTerm   = `trap 'echo > "$M/term"; exit 5' TERM; echo > "$M/ready"; while :; do sleep 0.02; done`
)

func wantCode(t *testing.T, ev backend.Event, code int) {
	t.Helper()
	if ev.ExitCode == nil || *ev.ExitCode != code || ev.Signal != "" || ev.Lost || ev.Preempted {
		t.Errorf("attempt %d: Exited %+v (exit code %s), want exit code %d", ev.AttemptID, ev, fmtCode(ev.ExitCode), code)
	}
}

func fmtCode(c *int) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprint(*c)
}

// wantSignal checks that ev says the trial died of sig ("killed",
// "terminated"), or, for a backend that does not declare Signals, of the
// exit status 128+num a shell gives it.
func (s *suite) wantSignal(t *testing.T, ev backend.Event, sig string, num int) {
	t.Helper()
	if ev.Lost {
		t.Errorf("attempt %d: Exited Lost, want signal %s: %+v", ev.AttemptID, sig, ev)
		return
	}
	if ev.Signal == sig && ev.ExitCode == nil {
		return
	}
	if !s.h.Caps.Signals && ev.Signal == "" && ev.ExitCode != nil && *ev.ExitCode == 128+num {
		return
	}
	t.Errorf("attempt %d: Exited %+v (exit code %s), want signal %q", ev.AttemptID, ev, fmtCode(ev.ExitCode), sig)
}

func (s *suite) exitCodes(t *testing.T) {
	b, w := s.newBackend(t)
	for _, code := range []int{0, 3} {
		sp := s.spec(t, fmt.Sprintf("exit %d", code))
		s.start(t, b, sp)
		if ev := s.started(t, w, sp); sp.Pool == "" && ev.Pool != "" && !isPooled(b) {
			t.Errorf("attempt %d: Started on pool %q of a backend without pools", sp.AttemptID, ev.Pool)
		}
		wantCode(t, s.exited(t, w, sp), code)
	}
}

func isPooled(b backend.Backend) bool {
	p, ok := b.(backend.Pooled)
	return ok && p.Pools() != nil
}

func (s *suite) signalDeath(t *testing.T) {
	b, w := s.newBackend(t)
	sp := s.spec(t, `kill -KILL $$`)
	s.start(t, b, sp)
	s.wantSignal(t, s.exited(t, w, sp), "killed", 9)
}

// stopTermThenKill: Stop sends SIGTERM (a trial that traps it exits as it
// likes), and SIGKILL after the grace to one that ignores it.
func (s *suite) stopTermThenKill(t *testing.T) {
	b, w := s.newBackend(t)
	grace := max(500*time.Millisecond, s.h.Caps.MinGrace)

	term := s.spec(t, trapTerm)
	s.start(t, b, term)
	s.started(t, w, term)
	s.marker(t, w, term, "ready")
	if err := b.Stop(term.AttemptID, 10*grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	s.marker(t, w, term, "term")
	ev := s.exited(t, w, term)
	if ev.ExitCode == nil || *ev.ExitCode != 5 || ev.Preempted || ev.Lost {
		t.Errorf("a trial that exits 5 on SIGTERM: Exited %+v (exit code %s), want exit code 5", ev, fmtCode(ev.ExitCode))
	}

	deaf := s.spec(t, ignoreTerm)
	s.start(t, b, deaf)
	s.started(t, w, deaf)
	s.marker(t, w, deaf, "ready")
	stopped := time.Now()
	if err := b.Stop(deaf.AttemptID, grace); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	ev = s.exited(t, w, deaf)
	if took := time.Since(stopped); took < grace {
		t.Errorf("a trial that ignores SIGTERM ended %s after Stop, before the grace of %s", took, grace)
	}
	s.wantSignal(t, ev, "killed", 9)
	if ev.Preempted {
		t.Errorf("a stopped attempt is reported Preempted: %+v", ev)
	}
}

func (s *suite) stopEnded(t *testing.T) {
	b, w := s.newBackend(t)
	sp := s.spec(t, "exit 0")
	s.start(t, b, sp)
	s.exited(t, w, sp)
	if err := b.Stop(sp.AttemptID, 0); err != nil {
		t.Errorf("Stop of an attempt that ended: %v", err)
	}
	if err := b.Stop(sp.AttemptID+1_000_000, time.Second); err != nil {
		t.Errorf("Stop of an attempt never started here: %v", err)
	}
}

// startTwice: a second Start of an attempt, running or ended, is an error
// and starts nothing.
func (s *suite) startTwice(t *testing.T) {
	b, w := s.newBackend(t)
	sp := s.spec(t, waitGo)
	s.start(t, b, sp)
	s.started(t, w, sp)
	free := b.Free()
	if err := b.Start(context.Background(), sp); err == nil {
		t.Errorf("a second Start of running attempt %d succeeded", sp.AttemptID)
	}
	if got := b.Free(); got != free {
		t.Errorf("a refused Start changed Free from %+v to %+v", free, got)
	}
	touch(t, sp, "go")
	wantCode(t, s.exited(t, w, sp), 0)
	if err := b.Start(context.Background(), sp); err == nil {
		t.Errorf("a second Start of ended attempt %d succeeded", sp.AttemptID)
	}
	// The same attempt in a fresh directory is still the same attempt.
	again := s.spec(t, "exit 0")
	again.AttemptID = sp.AttemptID
	if err := b.Start(context.Background(), again); err == nil {
		t.Errorf("a second Start of ended attempt %d, in another directory, succeeded", sp.AttemptID)
	}
	w.close(t) // no second Started or Exited
}

// stopAtOnce: a Stop that comes before the attempt is seen running still
// ends it, with one Exited.
func (s *suite) stopAtOnce(t *testing.T) {
	b, w := s.newBackend(t)
	free0 := b.Free()
	sp := s.spec(t, waitGo)
	s.start(t, b, sp)
	if err := b.Stop(sp.AttemptID, s.h.Caps.MinGrace); err != nil {
		t.Fatalf("Stop right after Start: %v", err)
	}
	if err := b.Stop(sp.AttemptID, s.h.Caps.MinGrace); err != nil {
		t.Fatalf("a second Stop: %v", err)
	}
	if ev := s.exited(t, w, sp); ev.ExitCode != nil && *ev.ExitCode == 0 {
		t.Errorf("an attempt stopped before it could finish exited 0: %+v", ev)
	}
	if got := b.Free(); !same(got, free0) {
		t.Errorf("Free after a stopped attempt: %+v, want %+v", got, free0)
	}
}

// concurrent: attempts started from several goroutines at once each get
// their events once.
func (s *suite) concurrent(t *testing.T) {
	b, w := s.newBackend(t)
	const n = 3
	specs := make([]*backend.StartSpec, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range specs {
		specs[i] = s.spec(t, "exit "+fmt.Sprint(10+i))
	}
	for i := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.Start(context.Background(), specs[i])
		}()
	}
	wg.Wait()
	for i, sp := range specs {
		if errs[i] != nil {
			t.Fatalf("Start attempt %d: %v", sp.AttemptID, errs[i])
		}
		wantCode(t, s.exited(t, w, sp), 10+i)
	}
	w.close(t)
}

// capacity: attempts are started until one is refused with ErrNoCapacity;
// Free goes down by what each reserves and comes back once they all ended.
func (s *suite) capacity(t *testing.T) {
	b, w := s.newBackend(t)
	free0 := b.Free()
	if sz, ok := b.(backend.Sizer); ok && !same(sz.Capacity(), free0) {
		t.Errorf("Free %+v of an idle backend is not its Capacity %+v", free0, sz.Capacity())
	}
	var running []*backend.StartSpec
	for {
		if len(running) > 32 {
			t.Fatalf("%d attempts of %+v started without ErrNoCapacity (free at first: %+v)", len(running), s.h.Unit, free0)
		}
		sp := s.spec(t, waitGo)
		err := b.Start(context.Background(), sp)
		if err != nil {
			if !errors.Is(err, virga.ErrNoCapacity) {
				t.Fatalf("Start refused attempt %d with %v, want an error wrapping virga.ErrNoCapacity", sp.AttemptID, err)
			}
			if evs := w.events(sp.AttemptID); len(evs) > 0 {
				t.Errorf("a refused attempt had events: %+v", evs)
			}
			break
		}
		running = append(running, sp)
		want := free0
		for range running {
			want = want.Sub(s.h.Unit)
		}
		if got := b.Free(); !same(got, want) {
			t.Errorf("Free with %d attempts of %+v running: %+v, want %+v", len(running), s.h.Unit, got, want)
		}
	}
	if len(running) == 0 {
		t.Fatalf("the first attempt was refused (free: %+v)", free0)
	}
	for _, sp := range running {
		s.started(t, w, sp)
		touch(t, sp, "go")
	}
	for _, sp := range running {
		wantCode(t, s.exited(t, w, sp), 0)
	}
	if got := b.Free(); !same(got, free0) {
		t.Errorf("Free once every attempt exited: %+v, want %+v as before they started", got, free0)
	}
}

func same(a, b virga.Resources) bool {
	return math.Abs(a.CPU-b.CPU) < 1e-9 && a.MemoryMB == b.MemoryMB && a.GPU == b.GPU
}

// times multiplies r by n.
func times(r virga.Resources, n int) virga.Resources {
	return virga.Resources{CPU: r.CPU * float64(n), MemoryMB: r.MemoryMB * int64(n), GPU: r.GPU * n}
}

// gang: a gang of two runs as one attempt (one Started, one Exited with
// the gang's status); one of its nodes failing ends it all; a gang too
// large for what is free starts nothing.
func (s *suite) gang(t *testing.T) {
	b, w := s.newBackend(t)
	if !s.h.Caps.Gang {
		sp := s.spec(t, "exit 0")
		sp.Nodes, sp.Resources = 2, times(s.h.Unit, 2)
		if err := b.Start(context.Background(), sp); err == nil {
			t.Errorf("a backend that declares no gangs started a gang of 2")
		}
		return
	}
	free0 := b.Free()

	ok := s.spec(t, "exit 0")
	ok.Nodes, ok.Resources = 2, times(s.h.Unit, 2)
	s.start(t, b, ok)
	s.started(t, w, ok)
	wantCode(t, s.exited(t, w, ok), 0)

	// Rank 1 fails; rank 0 would sleep for ever.
	broken := s.spec(t, `if [ "${RANK:-${VIRGA_NODE_RANK:-0}}" = 1 ]; then exit 3; fi; echo > "$M/ready"; while :; do sleep 0.02; done`)
	broken.Nodes, broken.Resources = 2, times(s.h.Unit, 2)
	s.start(t, b, broken)
	ev := s.exited(t, w, broken)
	if ev.Lost || (ev.ExitCode != nil && *ev.ExitCode == 0) {
		t.Errorf("a gang whose rank 1 exited 3: Exited %+v (exit code %s), want a failure", ev, fmtCode(ev.ExitCode))
	}

	// All or nothing: more nodes than are free.
	huge := s.spec(t, "exit 0")
	huge.Nodes = 64
	huge.Resources = times(s.h.Unit, huge.Nodes)
	if err := b.Start(context.Background(), huge); err == nil {
		t.Errorf("a gang of %d nodes of %+v started with %+v free", huge.Nodes, s.h.Unit, free0)
	}
	if got := b.Free(); !same(got, free0) {
		t.Errorf("Free after the gangs: %+v, want %+v", got, free0)
	}
	w.close(t)
	if evs := w.events(huge.AttemptID); len(evs) > 0 {
		t.Errorf("a gang refused by Start had events: %+v", evs)
	}
}

// pools: an attempt placed on each named pool runs there (its events say
// so), takes its resources from that pool alone, and gives them back.
func (s *suite) pools(t *testing.T) {
	b, w := s.newBackend(t)
	pb, ok := b.(backend.Pooled)
	if !ok || pb.Pools() == nil {
		t.Logf("%s: no named pools (declared by the backend's Pools)", b.Name())
		return
	}
	before := pb.Pools()
	for i, p := range before {
		sp := s.spec(t, waitGo)
		sp.Pool = p.Name
		s.start(t, b, sp)
		if ev := s.started(t, w, sp); ev.Pool != p.Name {
			t.Errorf("attempt on pool %q: Started says pool %q", p.Name, ev.Pool)
		}
		for j, q := range pb.Pools() {
			want := before[j].Free
			if j == i {
				want = want.Sub(s.h.Unit)
			}
			if !same(q.Free, want) {
				t.Errorf("with an attempt of %+v on pool %q, pool %q has %+v free, want %+v", s.h.Unit, p.Name, q.Name, q.Free, want)
			}
		}
		touch(t, sp, "go")
		ev := s.exited(t, w, sp)
		wantCode(t, ev, 0)
		if ev.Pool != p.Name {
			t.Errorf("attempt on pool %q: Exited says pool %q", p.Name, ev.Pool)
		}
	}
	for j, q := range pb.Pools() {
		if !same(q.Free, before[j].Free) {
			t.Errorf("pool %q has %+v free once its attempt exited, want %+v", q.Name, q.Free, before[j].Free)
		}
	}
	sp := s.spec(t, "exit 0")
	sp.Pool = "no-such-pool"
	if err := b.Start(context.Background(), sp); err == nil {
		t.Errorf("Start on a pool that does not exist succeeded")
	}
}

// spot: when the spot pool is reclaimed, its attempts are warned with
// SIGTERM, killed at the reclaim if they still run, and reported Preempted;
// once it is down, Start on it fails with ErrNoCapacity.
func (s *suite) spot(t *testing.T) {
	if s.h.Spot == nil {
		t.Logf("declared: the backend does not emulate spot availability")
		return
	}
	warning := 600 * time.Millisecond
	reclaimAt := time.Now().Add(warning + 700*time.Millisecond)
	b := s.h.Spot(t, reclaimAt, warning)
	w := s.open(t, b)

	polite := s.spec(t, trapTerm)
	polite.Pool = "spot"
	deaf := s.spec(t, ignoreTerm)
	deaf.Pool = "spot"
	s.start(t, b, polite)
	s.start(t, b, deaf)
	ev := s.exited(t, w, polite)
	if !ev.Preempted || ev.Pool != "spot" {
		t.Errorf("an attempt on a reclaimed pool: Exited %+v, want Preempted on pool spot", ev)
	}
	ev = s.exited(t, w, deaf)
	if !ev.Preempted {
		t.Errorf("an attempt that ignored the reclaim's warning: Exited %+v, want Preempted", ev)
	}
	s.wantSignal(t, ev, "killed", 9)
	if ev.Time.Before(reclaimAt.Add(-50 * time.Millisecond)) {
		t.Errorf("an attempt that ignored the warning ended at %s, before the reclaim at %s", ev.Time, reclaimAt)
	}
	waitFor(t, s.h.Wait, "the spot pool to be down", func() bool {
		for _, p := range b.(backend.Pooled).Pools() {
			if p.Name == "spot" {
				return !p.Up
			}
		}
		return false
	})
	late := s.spec(t, "exit 0")
	late.Pool = "spot"
	if err := b.Start(context.Background(), late); !errors.Is(err, virga.ErrNoCapacity) {
		t.Errorf("Start on a pool that is down: %v, want an error wrapping virga.ErrNoCapacity", err)
	}
}

// adopt: Close leaves attempts running; a new instance adopts a running
// attempt (and reports its exit), one that ended meanwhile (Exited at once
// with its status) and one that never started (Exited Lost), each reserving
// nothing once over; an adopted attempt cannot be started again.
func (s *suite) adopt(t *testing.T) {
	b1, w1 := s.newBackend(t)
	if _, ok := b1.(backend.Adopter); !ok {
		t.Logf("declared: %s is not a backend.Adopter", b1.Name())
		return
	}
	run := s.spec(t, waitGo)
	end := s.spec(t, `echo > "$M/ready"; while [ ! -e "$M/go" ]; do sleep 0.02; done; exit 4`)
	s.start(t, b1, run)
	s.start(t, b1, end)
	s.started(t, w1, run)
	s.started(t, w1, end)
	s.marker(t, w1, run, "ready")
	s.marker(t, w1, end, "ready")
	w1.close(t)
	// Closed: the trials run on. One ends before the next server comes.
	touch(t, end, "go")

	b2, w2 := s.newBackend(t)
	ad := b2.(backend.Adopter)
	free0 := b2.Free()
	never := s.spec(t, "exit 0")
	ctx := context.Background()
	for _, sp := range []*backend.StartSpec{run, end, never} {
		at := &virga.Attempt{ID: sp.AttemptID, TrialID: sp.TrialID, Backend: b2.Name(), Pool: sp.Pool, Dir: sp.Dir,
			State: virga.AttemptRunning}
		if err := ad.Adopt(ctx, at, sp.Resources); err != nil {
			t.Fatalf("Adopt attempt %d: %v", sp.AttemptID, err)
		}
	}
	wantCode(t, s.exited(t, w2, end), 4)
	if ev := s.exited(t, w2, never); !ev.Lost {
		t.Errorf("adopting an attempt that never started: Exited %+v, want Lost", ev)
	}
	if err := b2.Start(ctx, never); err == nil {
		t.Errorf("Start of an attempt adopted as never started succeeded: it may never start later")
	}
	fresh := s.spec(t, "exit 0")
	fresh.AttemptID = never.AttemptID
	if err := b2.Start(ctx, fresh); err == nil {
		t.Errorf("Start of an attempt adopted as never started, in another directory, succeeded")
	}
	// The running one was not killed by Close: it ends as it was told to.
	if evs := w2.events(run.AttemptID); len(evs) > 0 && evs[len(evs)-1].Kind == backend.Exited {
		t.Fatalf("the attempt running when the first instance closed ended before it was told to: %+v", evs)
	}
	if err := b2.Start(ctx, run); err == nil {
		t.Errorf("Start of an adopted attempt succeeded")
	}
	if got, most := b2.Free(), free0.Sub(run.Resources); got.CPU > most.CPU+1e-9 || got.MemoryMB > most.MemoryMB {
		t.Errorf("Free with an adopted attempt running: %+v, want at most %+v", got, most)
	}
	touch(t, run, "go")
	wantCode(t, s.exited(t, w2, run), 0)
	if got := b2.Free(); !same(got, free0) {
		t.Errorf("Free once the adopted attempts are over: %+v, want %+v", got, free0)
	}
}
