package control_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
)

// TestBudgetStopsRunningTrials: two trials at $0.005 a second each against a
// budget of $1 with a stop grace of 10 s: the experiment is stopped when what
// they would cost by the time a stop ends them reaches the budget, not
// before, and ends within the budget.
func TestBudgetStopsRunningTrials(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget", "max_trials: 4\nmax_concurrent: 2\nbudget: 1\nstop_grace: 10s\nresources: {cpu: 1, memory: 512MiB}"))
	s1, s2 := h.nextStart(), h.nextStart()
	t0 := clk.Now()
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: t0, PID: int(s.AttemptID)})
	}
	h.eventually("both attempts to run", func() bool {
		return h.attempts(s1.TrialID)[0].State == virga.AttemptRunning && h.attempts(s2.TrialID)[0].State == virga.AttemptRunning
	})
	// At 70 s: $0.70 spent, $0.80 by the end of a stop: go on.
	h.advance(70 * time.Second)
	if got := h.exp(e.ID); got.State != virga.ExperimentActive {
		t.Fatalf("at $0.70 of $1: %s (%s), want ACTIVE", got.State, got.Message)
	}
	// At 95 s: $0.95 spent, over $1 by the end of a stop: stop now.
	clk.Advance(25 * time.Second)
	h.eventually("the budget to stop the experiment", func() bool { return h.exp(e.ID).State == virga.ExperimentStopping })
	h.eventually("both attempts to be told to stop", func() bool {
		h.be.mu.Lock()
		defer h.be.mu.Unlock()
		return slices.Contains(h.be.stops, s1.AttemptID) && slices.Contains(h.be.stops, s2.AttemptID)
	})
	end := clk.Advance(5 * time.Second)
	for _, s := range []*backend.StartSpec{s1, s2} {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: end, Signal: "terminated"})
	}
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	if !strings.HasPrefix(got.Message, "budget of $1.00 reached") || !strings.Contains(got.Message, "checkpoints kept") {
		t.Errorf("message %q", got.Message)
	}
	total := 0.0
	for _, tr := range h.trials(e.ID) {
		if tr.State != virga.TrialStopped || tr.Message != "stopped: the experiment's budget is spent" {
			t.Errorf("trial %d: %s %q", tr.ID, tr.State, tr.Message)
		}
		for _, a := range h.attempts(tr.ID) {
			total += a.Cost
		}
	}
	// 2 x 100 s at $0.005/s.
	wantCost(t, "total cost", total, 1.0)
	if n := len(h.trials(e.ID)); n != 2 {
		t.Errorf("%d trials, want the 2 that ran", n)
	}
}

// TestBudgetDoesNotStartWhatDoesNotFit: after a trial of 100 s ($0.50), the
// next one is expected to cost as much, and at least what 122 s cost (two
// ticks and the stop grace of 120 s: the budget check could stop it no
// sooner), which does not fit in the $0.30 left of $0.80: it is not started
// and the experiment says why.
func TestBudgetDoesNotStartWhatDoesNotFit(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget-next", "max_trials: 3\nmax_concurrent: 1\nbudget: 0.8\nresources: {cpu: 1, memory: 512MiB}"))
	s := h.nextStart()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 1})
	code := 0
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(100 * time.Second), ExitCode: &code})
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	h.noStart()
	if !strings.Contains(got.Message, "budget of $0.80 reached: $0.50 spent or committed, and its next trial, counted for 2m2s (its restart overhead, two ticks and the stop grace: the least it runs before the budget could stop it) would cost $0.61") {
		t.Errorf("message %q", got.Message)
	}
	// The searcher is not asked for a trial that could not start.
	if trials := h.trials(e.ID); len(trials) != 1 {
		t.Errorf("%d trials, want only the one that ran: %+v", len(trials), trials)
	}
}

// TestBudgetSurvivesRestart: what ended attempts cost is counted again after
// a crash of the server. With $1.20, two trials of $0.50 fit, a third does
// not; a restart between the first and second must not forget the first.
func TestBudgetSurvivesRestart(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget-crash", "max_trials: 3\nmax_concurrent: 1\nbudget: 1.2\nresources: {cpu: 1, memory: 512MiB}"))
	run := func(s *backend.StartSpec) {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: int(s.AttemptID)})
		code := 0
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(100 * time.Second), ExitCode: &code})
		h.waitTrial(s.TrialID, virga.TrialCompleted)
	}
	s1 := h.nextStart()
	run(s1)
	s2 := h.nextStart()
	h.crash()
	h.start(&adoptingBackend{newFakeBackend()})
	h.lost(s2.AttemptID) // never started: it is started again
	s2 = h.nextStart()
	run(s2)
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	h.noStart()
	if !strings.Contains(got.Message, "$1.00 spent or committed") {
		t.Errorf("message %q", got.Message)
	}
}

func TestSubmitRefusesAPassedDeadline(t *testing.T) {
	h, _ := costHarness(t) // the clock says 2026-03-01T12:00:00Z
	_, err := h.ctl.Submit(t.Context(), "late.yaml", []byte(expYAML("late", "deadline: 2026-03-01T11:00:00Z")))
	if err == nil || err.Error() != "late.yaml:8:11: deadline: 2026-03-01T11:00:00Z has passed (it is 2026-03-01T12:00:00Z); give a later time or a duration from submission like 36h" {
		t.Fatalf("got %v", err)
	}
	if _, err := h.ctl.Submit(t.Context(), "ok.yaml", []byte(expYAML("ok", "deadline: 2026-03-01T13:00:00Z"))); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetCountsStartsOfOnePass: with each start billed a whole hour ($9 for
// a trial's share) and $10 to spend, one trial starts, not the four that
// max_concurrent allows in the same pass, and the experiment stops after it.
func TestBudgetCountsStartsOfOnePass(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t)
	h.clk = clk
	h.pricer = &capacity.Pricer{Pools: map[string]capacity.PricedPool{
		"": {Price: capacity.Constant(18), Node: virga.Resources{CPU: 4, MemoryMB: 1024}, Billing: capacity.PerHour},
	}}
	h.start(newFakeBackend())
	e := h.submit(expYAML("budget-pass", "max_trials: 4\nmax_concurrent: 4\nbudget: 10\nresources: {cpu: 1, memory: 512MiB}"))
	s := h.nextStart()
	h.noStart()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 1})
	code := 0
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(100 * time.Second), ExitCode: &code})
	got := h.waitExp(e.ID, virga.ExperimentStopped)
	h.noStart()
	if !strings.Contains(got.Message, "budget of $10.00 reached: $9.00 spent or committed") {
		t.Errorf("message %q", got.Message)
	}
}

// TestBudgetStartsOnlyWhatCanRun: with $1 and the default stop grace of
// 120 s, two trials at $0.005 a second would be stopped by the budget check
// a tick after they start (by the end of a stop they would have cost $1.23),
// having trained for nothing; one trial can run 78 s before the check must
// stop it. Only one is started, and it runs until then.
func TestBudgetStartsOnlyWhatCanRun(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("budget-room", "max_trials: 4\nmax_concurrent: 2\nbudget: 1\nresources: {cpu: 1, memory: 512MiB}"))
	s := h.nextStart()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 1})
	h.eventually("the attempt to run", func() bool { return h.attempts(s.TrialID)[0].State == virga.AttemptRunning })
	h.noStart()
	h.advance(60 * time.Second)
	if got := h.exp(e.ID); got.State != virga.ExperimentActive {
		t.Fatalf("after 60 s, $0.30 spent of $1: %s (%s), want ACTIVE", got.State, got.Message)
	}
	clk.Advance(20 * time.Second)
	h.eventually("the budget to stop the experiment", func() bool { return h.exp(e.ID).State == virga.ExperimentStopping })
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(time.Second), Signal: "terminated"})
	h.waitExp(e.ID, virga.ExperimentStopped)
	if n := len(h.trials(e.ID)); n != 1 {
		t.Errorf("%d trials, want the one that ran", n)
	}
	wantCost(t, "cost", h.attempts(s.TrialID)[0].Cost, 0.405)
}
