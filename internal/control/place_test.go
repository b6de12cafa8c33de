package control_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/store"
)

// pooledBackend is an adopting fake backend with pools: the test sets each
// pool's capacity and whether it is up; Free is the capacity less what the
// attempts started on the pool and not ended with exit take.
type pooledBackend struct {
	*fakeBackend

	pmu   sync.Mutex
	pools []backend.PoolStatus
	on    map[int64]*backend.StartSpec // started, not yet ended by exit
}

var (
	_ backend.Backend = (*pooledBackend)(nil)
	_ backend.Pooled  = (*pooledBackend)(nil)
	_ backend.Adopter = (*pooledBackend)(nil)
)

func newPooledBackend(pools ...backend.PoolStatus) *pooledBackend {
	return &pooledBackend{fakeBackend: newFakeBackend(), pools: pools, on: map[int64]*backend.StartSpec{}}
}

func (p *pooledBackend) fake() *fakeBackend { return p.fakeBackend }

func (p *pooledBackend) Start(ctx context.Context, s *backend.StartSpec) error {
	// Reserved before the test can see the start (and end it).
	p.pmu.Lock()
	p.on[s.AttemptID] = s
	p.pmu.Unlock()
	if err := p.fakeBackend.Start(ctx, s); err != nil {
		p.pmu.Lock()
		delete(p.on, s.AttemptID)
		p.pmu.Unlock()
		return err
	}
	return nil
}

func (p *pooledBackend) Adopt(ctx context.Context, at *virga.Attempt, res virga.Resources) error {
	return (&adoptingBackend{p.fakeBackend}).Adopt(ctx, at, res)
}

func (p *pooledBackend) Pools() []backend.PoolStatus {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	out := slices.Clone(p.pools)
	for i := range out {
		out[i].Free = out[i].Capacity
		for _, s := range p.on {
			if s.Pool == out[i].Name {
				out[i].Free = out[i].Free.Sub(s.Resources)
			}
		}
	}
	return out
}

// setUp sets whether pool name is up.
func (p *pooledBackend) setUp(name string, up bool) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	for i := range p.pools {
		if p.pools[i].Name == name {
			p.pools[i].Up = up
		}
	}
}

// exit ends an attempt as the backend would: its resources are free before
// its Exited event.
func (p *pooledBackend) exit(ev backend.Event) {
	p.pmu.Lock()
	if s := p.on[ev.AttemptID]; s != nil && ev.Pool == "" {
		ev.Pool = s.Pool
	}
	delete(p.on, ev.AttemptID)
	p.pmu.Unlock()
	ev.Kind = backend.Exited
	if ev.Time.IsZero() {
		ev.Time = p.clk.Now()
	}
	p.emit(ev)
}

func (p *pooledBackend) preempt(attemptID int64) {
	p.exit(backend.Event{AttemptID: attemptID, Signal: "killed", Preempted: true})
}

// onePerPool is a spot pool and an on-demand pool with room for one trial of
// 1 cpu each; spot is up when spotUp.
func onePerPool(spotUp bool) *pooledBackend {
	one := virga.Resources{CPU: 1}
	return newPooledBackend(
		backend.PoolStatus{Name: "spot", Capacity: one, Preemptible: true, Up: spotUp, Warning: time.Minute},
		backend.PoolStatus{Name: "ondemand", Capacity: one, Up: true},
	)
}

// settle reports s started and waits until that is committed, with the
// events of its creation: the loop then has nothing left to write, so the
// test can end without cutting a commit short.
func (h *harness) settle(s *backend.StartSpec) {
	h.t.Helper()
	h.started(s)
	h.eventually("the attempt to be recorded running", func() bool {
		for _, a := range h.attempts(s.TrialID) {
			if a.ID == s.AttemptID {
				return a.State == virga.AttemptRunning
			}
		}
		return false
	})
}

func TestFirstFit(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	one := virga.Resources{CPU: 1}
	spot := func(up bool, next time.Time) backend.PoolStatus {
		return backend.PoolStatus{Name: "spot", Capacity: one, Free: one, Preemptible: true, Up: up, Next: next, Warning: 2 * time.Minute}
	}
	ondemand := backend.PoolStatus{Name: "ondemand", Capacity: one, Free: one, Up: true}
	full := ondemand
	full.Free = virga.Resources{}
	tests := []struct {
		name  string
		pools []backend.PoolStatus
		// wantPool is the pick; "" means wait.
		wantPool string
	}{
		{"first up with room", []backend.PoolStatus{spot(true, time.Time{}), ondemand}, "spot"},
		{"spot up until later", []backend.PoolStatus{spot(true, now.Add(time.Hour)), ondemand}, "spot"},
		{"spot down", []backend.PoolStatus{spot(false, now.Add(time.Hour)), ondemand}, "ondemand"},
		{"spot being reclaimed", []backend.PoolStatus{spot(true, now.Add(time.Minute)), ondemand}, "ondemand"},
		{"no room anywhere up", []backend.PoolStatus{spot(false, time.Time{}), full}, ""},
		{"no pools", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := control.FirstFit(&control.Placement{Now: now, Needs: one, Pools: tc.pools})
			if got != tc.wantPool || ok != (tc.wantPool != "") {
				t.Errorf("FirstFit = %q, %v; want %q", got, ok, tc.wantPool)
			}
		})
	}
}

// TestPlacementOnPools: trials go to the first pool up with room; with none
// they wait, queued, and start once a pool comes up. The pool is committed
// with the attempt and handed to the backend.
func TestPlacementOnPools(t *testing.T) {
	h := newHarness(t)
	be := onePerPool(false)
	h.start(be)
	e := h.submit(expYAML("placed", "max_trials: 2\nmax_concurrent: 2\nresources: {cpu: 1}"))
	s1 := h.nextStart()
	if s1.Pool != "ondemand" {
		t.Fatalf("first attempt on pool %q, want ondemand (spot is down)", s1.Pool)
	}
	h.started(s1)
	h.noStart() // ondemand is full, spot down
	if ts := h.trials(e.ID); len(ts) != 1 {
		t.Fatalf("%d trials, want 1: no trial is proposed while no pool has room", len(ts))
	}
	be.setUp("spot", true)
	s2 := h.nextStart()
	if s2.Pool != "spot" {
		t.Fatalf("second attempt on pool %q, want spot once it is up", s2.Pool)
	}
	h.settle(s2)
	for _, s := range []*backend.StartSpec{s1, s2} {
		if as := h.attempts(s.TrialID); len(as) != 1 || as[0].Pool != s.Pool {
			t.Errorf("trial %d: attempts %+v, want one on pool %s", s.TrialID, as, s.Pool)
		}
	}
}

// TestPlaceHook: the placement policy is asked with the trial and the pools
// (net of attempts not yet seen started); a pool it picks that cannot take
// the trial is refused and the trial waits.
func TestPlaceHook(t *testing.T) {
	h := newHarness(t)
	var mu sync.Mutex
	var asked []control.Placement
	pick := "nowhere"
	h.place = func(p *control.Placement) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, *p)
		return pick, true
	}
	be := onePerPool(true)
	h.start(be)
	h.submit(expYAML("hook", "max_trials: 1\nresources: {cpu: 1}"))
	h.eventually("the policy to be asked", func() bool { mu.Lock(); defer mu.Unlock(); return len(asked) > 0 })
	h.noStart() // "nowhere" is no pool
	mu.Lock()
	pick = "ondemand"
	mu.Unlock()
	s := h.nextStart()
	if s.Pool != "ondemand" {
		t.Fatalf("attempt on pool %q, want the policy's ondemand", s.Pool)
	}
	h.settle(s)
	mu.Lock()
	defer mu.Unlock()
	p := asked[len(asked)-1]
	if p.Trial == nil || p.Trial.Seq != 1 || p.Spec == nil || p.Experiment == nil || p.Now.IsZero() {
		t.Errorf("Placement %+v, want the trial, its experiment and spec, and the time", p)
	}
	if diff := cmp.Diff(virga.Resources{CPU: 1}, p.Needs); diff != "" {
		t.Errorf("Needs (-want,+got):\n%s", diff)
	}
	if len(p.Pools) != 2 || p.Pools[0].Name != "spot" || p.Pools[1].Name != "ondemand" || p.Pools[1].Free != (virga.Resources{CPU: 1}) {
		t.Errorf("Pools %+v, want spot then ondemand, with room", p.Pools)
	}
}

// TestPreemptedTrialResumes: an attempt preempted on a spot pool is
// PREEMPTED, its trial resumes from its latest checkpoint on the pool up
// (the on-demand one), and no restart is counted.
func TestPreemptedTrialResumes(t *testing.T) {
	h := newHarness(t)
	be := onePerPool(true)
	h.start(be)
	e := h.submit(expYAML("preempted", "max_trials: 1\nmax_restarts: 0\nresources: {cpu: 1}"))
	s := h.nextStart()
	if s.Pool != "spot" {
		t.Fatalf("first attempt on %q, want spot", s.Pool)
	}
	h.started(s)
	writeCkpt(t, s, "step 3")
	h.report(s.AttemptID, 3, 0.5)
	ckpt := h.trial(s.TrialID).Checkpoint
	if ckpt == "" {
		t.Fatal("no checkpoint recorded")
	}
	be.setUp("spot", false)
	be.preempt(s.AttemptID)

	s2 := h.nextStart()
	if s2.TrialID != s.TrialID || s2.Pool != "ondemand" {
		t.Fatalf("next start %+v, want trial %d on ondemand", s2, s.TrialID)
	}
	tr := h.trial(s.TrialID)
	as := h.attempts(s.TrialID)
	if as[0].Outcome != virga.OutcomePreempted || as[0].Pool != "spot" || as[1].Restored != ckpt || as[1].Pool != "ondemand" {
		t.Errorf("attempts %+v, %+v; want the first PREEMPTED on spot, the second on ondemand from %s", as[0], as[1], ckpt)
	}
	if tr.Restarts != 0 {
		t.Errorf("restarts %d, want 0: a preemption is not the trial's fault", tr.Restarts)
	}
	evs, err := h.st.Events(context.Background(), store.EventFilter{ExperimentID: e.ID})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []virga.EventKind
	for _, ev := range evs {
		if ev.Kind == virga.EventTrialPreempted && strings.Contains(ev.Message, "pool spot reclaimed its capacity") && strings.Contains(ev.Message, ckpt[:12]) {
			kinds = append(kinds, ev.Kind)
		}
		if ev.Kind == virga.EventAttemptExited && ev.AttemptID == s.AttemptID && !strings.Contains(ev.Message, "preempted: pool spot reclaimed its capacity (signal killed)") {
			t.Errorf("attempt.exited says %q, want the pool and the signal", ev.Message)
		}
	}
	if len(kinds) != 1 {
		t.Errorf("events %+v, want one trial.preempted naming the pool and the checkpoint", evs)
	}
	h.started(s2)
	code := 0
	be.exit(backend.Event{AttemptID: s2.AttemptID, ExitCode: &code})
	if tr := h.waitTrial(s.TrialID, virga.TrialCompleted); tr.Restarts != 0 {
		t.Errorf("completed with %d restarts, want 0", tr.Restarts)
	}
}

// TestPreemptionsWithoutProgressAreBounded: preemptions that save no new
// checkpoint are free up to a point; beyond it each counts as a restart, so
// a trial that can never finish between reclaims fails rather than loops.
func TestPreemptionsWithoutProgressAreBounded(t *testing.T) {
	h := newHarness(t)
	h.tick = 5 * time.Millisecond
	be := onePerPool(true)
	h.start(be)
	h.submit(expYAML("loop", "max_trials: 1\nmax_restarts: 1\nresources: {cpu: 1}"))
	var trialID int64
	for i := 0; i < 7; i++ {
		s := h.nextStart()
		trialID = s.TrialID
		h.started(s)
		be.preempt(s.AttemptID)
		h.step()
		h.clk.Advance(h.tick) // from the second, a preempted trial waits a tick
	}
	tr := h.waitTrial(trialID, virga.TrialFailed)
	if !strings.Contains(tr.Message, "preempted 7 times in a row without saving a new checkpoint") || tr.Restarts != 1 {
		t.Errorf("trial %+v, want FAILED after 5 free preemptions and max_restarts 1", tr)
	}
	h.noStart()
}

// TestPreemptedWhileStopping: an attempt preempted while its experiment is
// being stopped ends its trial as stopped.
func TestPreemptedWhileStopping(t *testing.T) {
	h := newHarness(t)
	be := onePerPool(true)
	h.start(be)
	e := h.submit(expYAML("stopping", "max_trials: 1\nresources: {cpu: 1}"))
	s := h.nextStart()
	h.started(s)
	if _, err := h.ctl.Control(context.Background(), e.ID, wire.OpStop); err != nil {
		t.Fatal(err)
	}
	h.eventually("the stop to reach the backend", func() bool { return be.stopped(s.AttemptID) })
	be.preempt(s.AttemptID)
	h.waitExp(e.ID, virga.ExperimentStopped)
	if tr := h.trial(s.TrialID); tr.State != virga.TrialStopped {
		t.Errorf("trial %s, want STOPPED", tr.State)
	}
	if a := h.attempts(s.TrialID)[0]; a.Outcome != virga.OutcomePreempted {
		t.Errorf("attempt outcome %s, want PREEMPTED", a.Outcome)
	}
}

// TestRecoverAttemptOnPool: after a crash the attempt is adopted with its
// pool, and a preemption seen by the next server resumes the trial.
func TestRecoverAttemptOnPool(t *testing.T) {
	h := newHarness(t)
	h.start(onePerPool(true))
	h.submit(expYAML("recover", "max_trials: 1\nmax_restarts: 0\nresources: {cpu: 1}"))
	s := h.nextStart()
	h.started(s)
	h.eventually("the attempt to run", func() bool { return h.attempts(s.TrialID)[0].State == virga.AttemptRunning })
	h.crash()

	be := onePerPool(true)
	h.start(be)
	be.mu.Lock()
	adopted := slices.Clone(be.adopted)
	be.mu.Unlock()
	if len(adopted) != 1 || adopted[0].ID != s.AttemptID || adopted[0].Pool != "spot" {
		t.Fatalf("adopted %+v, want attempt %d on pool spot", adopted, s.AttemptID)
	}
	be.setUp("spot", false)
	be.exit(backend.Event{AttemptID: s.AttemptID, Signal: "killed", Preempted: true, Pool: "spot"})
	s2 := h.nextStart()
	if s2.TrialID != s.TrialID || s2.Pool != "ondemand" {
		t.Fatalf("next start %+v, want trial %d on ondemand", s2, s.TrialID)
	}
	h.settle(s2)
	as := h.attempts(s.TrialID)
	if as[0].Outcome != virga.OutcomePreempted || h.trial(s.TrialID).Restarts != 0 {
		t.Errorf("attempt %+v, restarts %d; want PREEMPTED and no restart", as[0], h.trial(s.TrialID).Restarts)
	}
}
