package control_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/control"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/store"
)

// policyPools is what the experiment policy knows of onePerPool's pools:
// spot at $1 an hour, up half the time in runs of two hours; on-demand at
// $3; a restart takes 10 s on either.
func policyPools() map[string]control.PoolInfo {
	price := func(usd float64) func(time.Time) float64 { return func(time.Time) float64 { return usd } }
	one := virga.Resources{CPU: 1}
	return map[string]control.PoolInfo{
		"spot": {Spot: true, Node: one, Price: price(1), RestartOverhead: 10 * time.Second, MinBilled: time.Minute,
			Stats: schedule.PoolStats{Available: 0.5, MeanUp: 2 * time.Hour, MeanDown: 2 * time.Hour}},
		"ondemand": {Node: one, Price: price(3), RestartOverhead: 10 * time.Second, MinBilled: time.Minute},
	}
}

// policyHarness runs a controller on a fake clock over be with Virga's
// experiment policy and policyPools.
func policyHarness(t *testing.T, be *pooledBackend) (*harness, *clock.Fake) {
	clk := clock.NewFake(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	h := newHarness(t)
	h.clk = clk
	h.startPolicy(be)
	return h, clk
}

// startPolicy is h.start with Virga's experiment policy and policyPools.
func (h *harness) startPolicy(be *pooledBackend) {
	h.t.Helper()
	h.policy, h.poolInfo = &schedule.ExpPlanned{}, policyPools()
	h.start(be)
}

// policyYAML is an experiment of n trials, one at a time, with extra
// settings (a deadline).
func policyYAML(n int, extra string) string {
	return expYAML("policy", "max_trials: "+string(rune('0'+n))+"\nmax_concurrent: 1\nresources: {cpu: 1}\n"+extra)
}

// stepStart steps the loop once and returns the start it made, or nil.
func (h *harness) stepStart() *backend.StartSpec {
	h.t.Helper()
	h.step()
	select {
	case s := <-h.be.starts:
		return s
	default:
		return nil
	}
}

// train reports steps from..to of s, one a minute on clk, each saving a
// checkpoint when save.
func (h *harness) train(clk *clock.Fake, s *backend.StartSpec, from, to int64, save bool) {
	h.t.Helper()
	for step := from; step <= to; step++ {
		clk.Advance(time.Minute)
		if save {
			if err := os.WriteFile(filepath.Join(h.ctl.TrialDir(s.TrialID), "model"), []byte{byte(step)}, 0o644); err != nil {
				h.t.Fatal(err)
			}
		}
		if d := h.report(s.AttemptID, step, 1/float64(step)); d != "continue" {
			h.t.Fatalf("step %d: decision %s, want continue", step, d)
		}
	}
}

// complete runs s's trial to step 10 (a minute a step) and ends it.
func (h *harness) complete(be *pooledBackend, clk *clock.Fake, s *backend.StartSpec) {
	h.t.Helper()
	h.settle(s)
	h.train(clk, s, 1, 10, false)
	code := 0
	be.exit(backend.Event{AttemptID: s.AttemptID, ExitCode: &code})
	h.waitTrial(s.TrialID, virga.TrialCompleted)
}

// TestPolicyWaitsForSpotWhenTimeAllows: until a trial's length and a step time are known,
// the trials of an experiment with a deadline are placed first fit; then
// the policy places them. With a loose deadline and spot capacity down, it
// lets the next trial wait (first fit would start it on on-demand capacity
// at once) and starts it on spot capacity once some is up.
func TestPolicyWaitsForSpotWhenTimeAllows(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	e := h.submit(policyYAML(3, "deadline: 10h"))
	s1 := h.nextStart()
	if s1.Pool != "ondemand" {
		t.Fatalf("first trial on pool %q, want ondemand (first fit: spot is down)", s1.Pool)
	}
	h.complete(be, clk, s1)

	// Steps and step time known: the policy decides. Spot is down, the
	// deadline far: the second trial waits.
	h.eventually("a second trial", func() bool { return len(h.trials(e.ID)) == 2 })
	for range 3 {
		clk.Advance(30 * time.Second)
		if s := h.stepStart(); s != nil {
			t.Fatalf("trial %d started on pool %s while spot capacity is down and the deadline is far; want it to wait", s.TrialID, s.Pool)
		}
	}
	if tr := h.trials(e.ID)[1]; tr.State != virga.TrialQueued {
		t.Fatalf("second trial %s, want QUEUED", tr.State)
	}
	be.setUp("spot", true)
	clk.Advance(time.Second)
	s2 := h.nextStart()
	if s2.Pool != "spot" || s2.TrialID == s1.TrialID {
		t.Fatalf("attempt of trial %d on pool %q, want the second trial on spot", s2.TrialID, s2.Pool)
	}
	h.settle(s2)
}

// TestPolicyOnDemandForDeadline: with spot capacity down and a deadline
// that leaves little slack, the policy starts the waiting trial on
// on-demand capacity in time for the deadline.
func TestPolicyOnDemandForDeadline(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	start := clk.Now()
	e := h.submit(policyYAML(3, "deadline: 40m"))
	s1 := h.nextStart()
	h.complete(be, clk, s1)

	// 20 minutes of work left (two trials of ten one-minute steps), 30 to
	// the deadline: the second trial must start on on-demand capacity by
	// 20 minutes before the deadline.
	latest := start.Add(20 * time.Minute)
	var s2 *backend.StartSpec
	for s2 == nil && !clk.Now().After(latest) {
		if s2 = h.stepStart(); s2 == nil {
			clk.Advance(15 * time.Second)
		}
	}
	if s2 == nil {
		t.Fatalf("no trial started by %s, when on-demand capacity could still meet the deadline", latest.Sub(start))
	}
	if s2.Pool != "ondemand" {
		t.Fatalf("second trial on pool %q, want ondemand (spot is down)", s2.Pool)
	}
	// Until the slack runs short, waiting for spot capacity costs nothing:
	// the policy does not start the trial on on-demand capacity at once,
	// as first fit would.
	if waited := clk.Now().Sub(start); waited <= 10*time.Minute+15*time.Second {
		t.Errorf("second trial started %s after submission, at its first decision; want it to wait for spot capacity while the slack lasts", waited)
	}
	h.settle(s2)
	if n := len(h.trials(e.ID)); n != 2 {
		t.Errorf("%d trials, want 2 (one at a time)", n)
	}
}

// movingTrial submits three trials with a 10h deadline on pools both up,
// runs two steps of the second (saving a checkpoint) on spot capacity, then
// moves the clock to 20 minutes before the deadline: the trial must move to
// on-demand capacity. It returns the spot attempt (stopped) and the
// trial's checkpoint.
func movingTrial(t *testing.T, h *harness, be *pooledBackend, clk *clock.Fake) (*virga.Experiment, *backend.StartSpec, string) {
	t.Helper()
	start := clk.Now()
	e := h.submit(policyYAML(3, "deadline: 10h"))
	s1 := h.nextStart()
	if s1.Pool != "spot" {
		t.Fatalf("first trial on pool %q, want spot (first fit)", s1.Pool)
	}
	h.complete(be, clk, s1)
	clk.Advance(time.Second)
	s2 := h.nextStart()
	if s2.Pool != "spot" {
		t.Fatalf("second trial on pool %q, want spot: it is up and the deadline far", s2.Pool)
	}
	h.settle(s2)
	h.train(clk, s2, 1, 2, true)
	ckpt := h.trial(s2.TrialID).Checkpoint
	if ckpt == "" {
		t.Fatal("no checkpoint recorded")
	}
	if be.stopped(s2.AttemptID) {
		t.Fatal("the trial was stopped while the deadline is far")
	}

	// 18 minutes of work left and 20 to the deadline: everything runs on
	// on-demand capacity.
	clk.Advance(start.Add(10*time.Hour - 20*time.Minute).Sub(clk.Now()))
	h.eventually("the spot attempt to be stopped", func() bool { return be.stopped(s2.AttemptID) })
	tr := h.trial(s2.TrialID)
	if !strings.HasPrefix(tr.Message, "moving to on-demand pool ondemand: the deadline needs it") {
		t.Errorf("trial message %q, want it to say it moves to on-demand for the deadline", tr.Message)
	}
	return e, s2, ckpt
}

// TestPolicyMovesRunningTrial: a trial running on spot capacity when the
// deadline draws near is stopped, with an event saying why, and resumes
// from its checkpoint on on-demand capacity without counting a restart.
func TestPolicyMovesRunningTrial(t *testing.T) {
	be := onePerPool(true)
	h, clk := policyHarness(t, be)
	e, s2, ckpt := movingTrial(t, h, be, clk)
	tr := h.trial(s2.TrialID)
	evs, err := h.st.Events(context.Background(), store.EventFilter{TrialID: s2.TrialID})
	if err != nil {
		t.Fatal(err)
	}
	moving := false
	for _, ev := range evs {
		moving = moving || ev.Kind == virga.EventTrialMoving && ev.Message == tr.Message
	}
	if !moving {
		t.Errorf("no trial.moving event among %+v", evs)
	}
	if s := h.stepStart(); s != nil {
		t.Fatalf("trial %d started on %s before the moved attempt ended", s.TrialID, s.Pool)
	}
	// A report while it is being moved is recorded, and told to stop.
	clk.Advance(time.Minute)
	if d := h.report(s2.AttemptID, 3, 1.0/3); d != "stop" {
		t.Errorf("decision %s for a report of the attempt being moved, want stop", d)
	}

	be.exit(backend.Event{AttemptID: s2.AttemptID, Signal: "terminated"})
	s3 := h.nextStart()
	if s3.TrialID != s2.TrialID || s3.Pool != "ondemand" {
		t.Fatalf("next attempt: trial %d on %q, want trial %d on ondemand", s3.TrialID, s3.Pool, s2.TrialID)
	}
	h.settle(s3)
	as := h.attempts(s2.TrialID)
	if len(as) != 2 || as[0].Outcome != virga.OutcomeStopped || as[1].Restored != ckpt || as[1].Pool != "ondemand" {
		t.Fatalf("attempts %+v, want a stopped one on spot, then one on ondemand from checkpoint %s", as, ckpt)
	}
	if tr := h.trial(s2.TrialID); tr.Restarts != 0 || tr.State != virga.TrialRunning {
		t.Errorf("trial %s with %d restarts, want RUNNING with none (a move is not a failure)", tr.State, tr.Restarts)
	}
	if h.exp(e.ID).State != virga.ExperimentActive {
		t.Errorf("experiment %s, want ACTIVE", h.exp(e.ID).State)
	}
}

// TestPolicyNoDeadlineFirstFit: an experiment without a deadline is placed
// first fit even with a policy: with spot capacity down its second trial
// starts on on-demand capacity at once (the policy, spot only without a
// deadline, would let it wait).
func TestPolicyNoDeadlineFirstFit(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	h.submit(policyYAML(2, ""))
	s1 := h.nextStart()
	h.complete(be, clk, s1)
	s2 := h.nextStart()
	if s2.Pool != "ondemand" || s2.TrialID == s1.TrialID {
		t.Fatalf("attempt of trial %d on %q, want the second trial on ondemand (first fit)", s2.TrialID, s2.Pool)
	}
	h.settle(s2)
}

// TestPolicyMoveAcrossRestart: a move in flight when the server stops goes
// on after recovery: the adopted attempt is stopped again, and once it
// exits the trial resumes from its checkpoint on on-demand capacity; the
// exit is not taken for a failure.
func TestPolicyMoveAcrossRestart(t *testing.T) {
	be := onePerPool(true)
	h, clk := policyHarness(t, be)
	_, s2, ckpt := movingTrial(t, h, be, clk)
	h.crash()

	be2 := onePerPool(true)
	h.startPolicy(be2)
	h.eventually("the adopted attempt to be stopped again", func() bool { return be2.stopped(s2.AttemptID) })
	be2.exit(backend.Event{AttemptID: s2.AttemptID, Signal: "terminated"})
	s3 := h.nextStart()
	if s3.TrialID != s2.TrialID || s3.Pool != "ondemand" {
		t.Fatalf("next attempt: trial %d on %q, want trial %d on ondemand", s3.TrialID, s3.Pool, s2.TrialID)
	}
	h.settle(s3)
	as := h.attempts(s2.TrialID)
	if len(as) != 2 || as[0].Outcome != virga.OutcomeStopped || as[1].Restored != ckpt {
		t.Fatalf("attempts %+v, want a stopped one, then one from checkpoint %s", as, ckpt)
	}
	if tr := h.trial(s2.TrialID); tr.Restarts != 0 {
		t.Errorf("trial with %d restarts, want none (a move is not a failure)", tr.Restarts)
	}
	// Recovery knew the attempt was being moved: the policy did not decide
	// the move again.
	evs, err := h.st.Events(context.Background(), store.EventFilter{TrialID: s2.TrialID})
	if err != nil {
		t.Fatal(err)
	}
	moves := 0
	for _, ev := range evs {
		if ev.Kind == virga.EventTrialMoving {
			moves++
		}
	}
	if moves != 1 {
		t.Errorf("%d trial.moving events, want 1", moves)
	}
}

// TestPolicyKeepsMoveTarget: while a trial moved to the only on-demand slot
// stops, the slot is kept for it: the policy does not move a second trial
// there meanwhile (which would leave one of them waiting), and the moved
// trial gets it once stopped.
func TestPolicyKeepsMoveTarget(t *testing.T) {
	be := newPooledBackend(
		backend.PoolStatus{Name: "spot", Capacity: virga.Resources{CPU: 2}, Preemptible: true, Up: true, Warning: time.Minute},
		backend.PoolStatus{Name: "ondemand", Capacity: virga.Resources{CPU: 1}, Up: true},
	)
	h, clk := policyHarness(t, be)
	start := clk.Now()
	h.submit(expYAML("policy", "max_trials: 4\nmax_concurrent: 2\nresources: {cpu: 1}\ndeadline: 10h"))
	s1, s2 := h.nextStart(), h.nextStart()
	if s1.Pool != "spot" || s2.Pool != "spot" {
		t.Fatalf("first trials on %q and %q, want both on spot (first fit)", s1.Pool, s2.Pool)
	}
	if s1.TrialID > s2.TrialID {
		s1, s2 = s2, s1
	}
	h.settle(s2)
	h.complete(be, clk, s1)
	s3 := h.nextStart()
	if s3.Pool != "spot" {
		t.Fatalf("third trial on %q, want spot: it is up and the deadline far", s3.Pool)
	}
	h.settle(s3)
	h.train(clk, s2, 1, 2, true)
	h.train(clk, s3, 1, 2, true)

	// Far too little time left: every trial should run on on-demand
	// capacity, which has room for one.
	clk.Advance(start.Add(10*time.Hour - 20*time.Minute).Sub(clk.Now()))
	h.eventually("the second trial to be stopped", func() bool { return be.stopped(s2.AttemptID) })
	for range 5 {
		h.advance(time.Second)
	}
	if be.stopped(s3.AttemptID) {
		t.Fatalf("the third trial was stopped too, while the only on-demand slot is kept for the second (%q)", h.trial(s3.TrialID).Message)
	}
	be.exit(backend.Event{AttemptID: s2.AttemptID, Signal: "terminated"})
	s4 := h.nextStart()
	if s4.TrialID != s2.TrialID || s4.Pool != "ondemand" {
		t.Fatalf("next attempt: trial %d on %q, want trial %d on ondemand", s4.TrialID, s4.Pool, s2.TrialID)
	}
	h.settle(s4)
}

// TestPolicySaysWhenTheDeadlineCannotBeMet: once the work left (two trials
// of ten one-minute steps, one at a time) is longer than the time left, the
// experiment is told so, once, with the earliest finish.
func TestPolicySaysWhenTheDeadlineCannotBeMet(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	e := h.submit(policyYAML(3, "deadline: 15m"))
	h.complete(be, clk, h.nextStart())
	late := func() []string {
		evs, err := h.st.Events(context.Background(), store.EventFilter{ExperimentID: e.ID})
		if err != nil {
			t.Fatal(err)
		}
		var msgs []string
		for _, ev := range evs {
			if ev.Kind == virga.EventExperimentLate {
				msgs = append(msgs, ev.Message)
			}
		}
		return msgs
	}
	h.eventually("the experiment to be told it is late", func() bool { return len(late()) > 0 })
	for range 3 {
		h.advance(20 * time.Second)
	}
	msgs := late()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0], "the deadline cannot be met even on on-demand capacity: about 20m0s of work left at 1 at a time, earliest finish about ") {
		t.Errorf("late events %q", msgs)
	}
}

// TestPolicyKnowsStepTimesAfterRestart: the step time learnt from a trial
// that ended is learnt again after a restart, so the policy (not first fit)
// goes on deciding: the waiting trial keeps waiting for spot capacity.
func TestPolicyKnowsStepTimesAfterRestart(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	e := h.submit(policyYAML(3, "deadline: 10h"))
	h.complete(be, clk, h.nextStart())
	h.eventually("a second trial", func() bool { return len(h.trials(e.ID)) == 2 })
	h.crash()

	be2 := onePerPool(false)
	h.startPolicy(be2)
	for range 3 {
		clk.Advance(30 * time.Second)
		if s := h.stepStart(); s != nil {
			t.Fatalf("after a restart, trial %d started on pool %s while spot capacity is down and the deadline is far; want it to wait", s.TrialID, s.Pool)
		}
	}
}

// TestPolicyDecidesFromTheSubmittedEstimate: an experiment submitted with
// an estimate (virga estimate --json: steps per trial, step time) is placed
// by the policy from its first trial, not first fit until a step time is
// measured; after a restart too. Virga's policy knows nothing of the
// search's progress yet, so it runs its trials on on-demand capacity (the
// second waits for it), where first fit would take the spot pool, first
// and up.
func TestPolicyDecidesFromTheSubmittedEstimate(t *testing.T) {
	be := onePerPool(true)
	h, clk := policyHarness(t, be)
	y := expYAML("policy", "max_trials: 3\nmax_concurrent: 2\nresources: {cpu: 1}\ndeadline: 10h\n")
	est := `{"steps_per_trial": 10, "step_time": 60000000000, "plans": []}`
	e, err := h.ctl.SubmitWithEstimate(context.Background(), "exp.yaml", []byte(y), []byte(est))
	if err != nil {
		t.Fatal(err)
	}
	s := h.nextStart()
	if s.Pool != "ondemand" {
		t.Fatalf("first trial on pool %q, want ondemand (Virga's policy before any work is done)", s.Pool)
	}
	h.settle(s)
	h.eventually("a second trial and the estimate recorded", func() bool {
		for _, ev := range h.evs() {
			if ev.Kind == virga.EventExperimentEstimate {
				return len(h.trials(e.ID)) == 2
			}
		}
		return false
	})
	onDemandOnly := func(when string) {
		t.Helper()
		for range 3 {
			clk.Advance(30 * time.Second)
			if s := h.stepStart(); s != nil {
				if s.Pool != "ondemand" {
					t.Fatalf("%s: trial %d started on pool %s; want on-demand capacity only", when, s.TrialID, s.Pool)
				}
				h.settle(s)
			}
		}
	}
	onDemandOnly("before a restart")
	h.crash()
	// The new backend does not count the adopted attempt: the on-demand
	// pool has room again.
	h.startPolicy(onePerPool(true))
	onDemandOnly("after a restart")

	// Without an estimate, the first pool with room takes the trials.
	h2, _ := policyHarness(t, onePerPool(true))
	h2.submit(policyYAML(3, "deadline: 10h"))
	if s = h2.nextStart(); s.Pool != "spot" {
		t.Fatalf("without an estimate, first trial on pool %q, want spot (first fit)", s.Pool)
	}
	h2.settle(s)
}

// TestPolicyMeasuresFirstSteps: an attempt's first report measures a step
// from when it began making progress (its start plus its pool's restart
// overhead). A trial of one step, as most of a search that restarts its
// trials at every rung, then gives the policy a step time: it decides the
// next trial (spot capacity down, the deadline far: it waits) instead of
// leaving it to the first pool with room.
func TestPolicyMeasuresFirstSteps(t *testing.T) {
	be := onePerPool(false)
	h, clk := policyHarness(t, be)
	e := h.submit(policyYAML(3, "deadline: 10h"))
	s1 := h.nextStart()
	h.settle(s1)
	h.train(clk, s1, 1, 1, false)
	code := 0
	be.exit(backend.Event{AttemptID: s1.AttemptID, ExitCode: &code})
	h.waitTrial(s1.TrialID, virga.TrialCompleted)
	h.eventually("a second trial", func() bool { return len(h.trials(e.ID)) == 2 })
	for range 3 {
		clk.Advance(30 * time.Second)
		if s := h.stepStart(); s != nil {
			t.Fatalf("trial %d started on pool %s while spot capacity is down and the deadline is far; want it to wait", s.TrialID, s.Pool)
		}
	}
}

// spentPolicy is Virga's policy, recording the budget and the spend of
// each snapshot it is asked about.
type spentPolicy struct {
	schedule.ExpPlanned
	mu   sync.Mutex
	seen [][2]float64 // budget, spent
}

func (p *spentPolicy) Place(e *schedule.Experiment, moves []schedule.Move) []schedule.Move {
	p.mu.Lock()
	p.seen = append(p.seen, [2]float64{e.Budget, e.Spent})
	p.mu.Unlock()
	return p.ExpPlanned.Place(e, moves)
}

func (p *spentPolicy) last() [2]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.seen) == 0 {
		return [2]float64{-1, -1}
	}
	return p.seen[len(p.seen)-1]
}

// TestPolicySeesWhatWasSpent: the policy asked about an experiment with a
// budget sees what it has spent, the attempts that ended and the running
// one priced up to now; without a budget, nothing (schedule.Experiment's
// Spent is read only against a budget, and pricing every running attempt
// at every pass was most of a large search's snapshot).
func TestPolicySeesWhatWasSpent(t *testing.T) {
	for _, budget := range []float64{100, 0} {
		be := onePerPool(true)
		clk := clock.NewFake(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
		h := newHarness(t)
		h.clk = clk
		pol := &spentPolicy{}
		h.policy, h.poolInfo = pol, policyPools()
		one := virga.Resources{CPU: 1}
		h.pricer = &capacity.Pricer{Pools: map[string]capacity.PricedPool{
			"spot":     {Price: capacity.Constant(1), Node: one, Billing: capacity.PerSecond},
			"ondemand": {Price: capacity.Constant(3), Node: one, Billing: capacity.PerSecond},
		}}
		h.start(be)
		extra := "deadline: 10h"
		if budget > 0 {
			extra += "\nbudget: 100"
		}
		e := h.submit(policyYAML(3, extra))
		s1 := h.nextStart()
		h.complete(be, clk, s1)
		s2 := h.nextStart()
		h.settle(s2)
		clk.Advance(30 * time.Minute)
		h.step() // a tick since the last decision: the policy is asked
		var want float64
		if budget > 0 {
			a1, a2 := h.attempts(s1.TrialID)[0], h.attempts(s2.TrialID)[0]
			running, err := control.AttemptCost(h.pricer, a2, one, clk.Now())
			if err != nil || a1.Cost <= 0 || running <= 0 {
				t.Fatalf("costs %g and %g (%v): want both priced", a1.Cost, running, err)
			}
			want = a1.Cost + running
		}
		if got := pol.last(); got != [2]float64{budget, want} {
			t.Errorf("budget %g: the policy saw budget %g and spent %g, want %g and %g", budget, got[0], got[1], budget, want)
		}
		h.eventually("the second trial to be recorded", func() bool { return len(h.trials(e.ID)) >= 2 })
	}
}
