package control_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/clock"
	"github.com/virga-ml/virga/internal/control"
)

var _ control.Pricer = (*capacity.Pricer)(nil)

// costHarness is a harness on a fake clock whose backend's default pool
// costs $36 an hour for a node of 4 cores and 1 GiB. Its experiments' trials
// take 1 core and 512 MiB, half the node (memory decides): $0.005 a second.
func costHarness(t *testing.T) (*harness, *clock.Fake) {
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	h := newHarness(t)
	h.clk = clk
	h.pricer = &capacity.Pricer{Pools: map[string]capacity.PricedPool{
		"": {Price: capacity.Constant(36), Node: virga.Resources{CPU: 4, MemoryMB: 1024}},
	}}
	h.start(newFakeBackend())
	return h, clk
}

// costRes is what costHarness's trials take.
var costRes = virga.Resources{CPU: 1, MemoryMB: 512}

const costYAML = "max_trials: 1\nmax_restarts: 5\nresources: {cpu: 1, memory: 512MiB}"

func wantCost(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// TestAttemptCostStored runs an attempt for 100 s: while it runs, its cost is
// not written but AttemptCost prices it up to the clock; when it ends, its
// final cost is stored.
func TestAttemptCostStored(t *testing.T) {
	h, clk := costHarness(t)
	e := h.submit(expYAML("cost", costYAML))
	s := h.nextStart()
	start := clk.Advance(10 * time.Second) // the process starts 10 s after the attempt is created
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: start, PID: 4242})
	var running *virga.Attempt
	h.eventually("the attempt to run", func() bool {
		as := h.attempts(s.TrialID)
		running = as[0]
		return len(as) == 1 && as[0].State == virga.AttemptRunning
	})
	wantCost(t, "stored cost of the running attempt", running.Cost, 0)
	live, err := control.AttemptCost(h.pricer, running, costRes, start.Add(40*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	wantCost(t, "cost of the running attempt after 40 s", live, 0.2)
	if c, err := control.AttemptCost(nil, running, costRes, start.Add(40*time.Second)); err != nil || c != 0 {
		t.Errorf("cost without a pricer = %v, %v; want 0", c, err)
	}

	h.report(s.AttemptID, 1, 0.5)
	code := 0
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(100 * time.Second), ExitCode: &code})
	h.waitTrial(s.TrialID, virga.TrialCompleted)
	a := h.attempts(s.TrialID)[0]
	wantCost(t, "cost of the attempt", a.Cost, 0.5)
	wantCost(t, "lost cost of the attempt", a.LostCost, 0)
	// Once it ended, its cost is the stored one, whatever the clock says.
	if c, err := control.AttemptCost(h.pricer, a, costRes, start.Add(time.Hour)); err != nil || c != a.Cost {
		t.Errorf("AttemptCost of the ended attempt = %v, %v; want its stored %v", c, err, a.Cost)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestPreemptedAttemptLostCost preempts a trial twice: the first attempt
// checkpointed 60 s into its 100 s, so the cost of its last 40 s is lost;
// the second saved nothing of its own, so all of its cost is lost. The third
// completes and loses nothing.
func TestPreemptedAttemptLostCost(t *testing.T) {
	h, clk := costHarness(t)
	h.submit(expYAML("preempted", costYAML))
	preempt := func(s *backend.StartSpec) {
		h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Now(), Signal: "killed", Preempted: true})
	}

	// 1. Checkpoint at 60 s, a report without a new checkpoint at 90 s,
	// preempted at 100 s.
	s := h.nextStart()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 1})
	clk.Advance(60 * time.Second)
	writeCkpt(t, s, "step 1")
	h.report(s.AttemptID, 1, 0.5)
	clk.Advance(30 * time.Second)
	h.report(s.AttemptID, 2, 0.4)
	clk.Advance(10 * time.Second)
	preempt(s)

	// 2. Restored from the first attempt's checkpoint, preempted after 30 s
	// without saving one.
	s2 := h.nextStart()
	h.be.emit(backend.Event{AttemptID: s2.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 2})
	clk.Advance(30 * time.Second)
	preempt(s2)

	// 3. Completes after 20 s.
	s3 := h.nextStart()
	h.be.emit(backend.Event{AttemptID: s3.AttemptID, Kind: backend.Started, Time: clk.Now(), PID: 3})
	code := 0
	h.be.emit(backend.Event{AttemptID: s3.AttemptID, Kind: backend.Exited, Time: clk.Advance(20 * time.Second), ExitCode: &code})
	h.waitTrial(s.TrialID, virga.TrialCompleted)

	as := h.attempts(s.TrialID)
	if len(as) != 3 {
		t.Fatalf("%d attempts, want 3", len(as))
	}
	for i, want := range []struct {
		outcome    virga.Outcome
		cost, lost float64
	}{
		{virga.OutcomePreempted, 0.5, 0.2},
		{virga.OutcomePreempted, 0.15, 0.15},
		{virga.OutcomeSucceeded, 0.1, 0},
	} {
		a := as[i]
		if a.Outcome != want.outcome {
			t.Errorf("attempt %d: outcome %s, want %s", a.Number, a.Outcome, want.outcome)
		}
		wantCost(t, fmt.Sprintf("cost of attempt %d", a.Number), a.Cost, want.cost)
		wantCost(t, fmt.Sprintf("lost cost of attempt %d", a.Number), a.LostCost, want.lost)
	}
}

// TestLostAttemptBilledUntilLastSeen: a lost attempt is billed up to the last
// moment it was known to run (its latest report, or the backend's last sight
// of it), not up to when the loss was noticed. An attempt runs 4 s, reports,
// and is found lost 45 s later, by the same server, by a server restarted
// after an outage, and by a backend that saw it run until 10 s.
func TestLostAttemptBilledUntilLastSeen(t *testing.T) {
	h, clk := costHarness(t)
	h.submit(expYAML("lost", "max_trials: 1\nmax_restarts: 5\nresources: {cpu: 1, memory: 512MiB}"))
	check := func(s *backend.StartSpec, start time.Time, want time.Duration) {
		t.Helper()
		var a *virga.Attempt
		h.eventually("the attempt to be settled", func() bool {
			for _, x := range h.attempts(s.TrialID) {
				if x.ID == s.AttemptID && x.State == virga.AttemptExited {
					a = x
				}
			}
			return a != nil
		})
		if a.Outcome != virga.OutcomeLost || !a.EndedAt.Equal(start.Add(want)) {
			t.Errorf("attempt %d: %s ended at +%s, want LOST at +%s", a.ID, a.Outcome, a.EndedAt.Sub(start), want)
		}
		wantCost(t, fmt.Sprintf("cost of lost attempt %d", a.ID), a.Cost, want.Seconds()*0.005)
	}

	// 1. Noticed by the server that watched it.
	s := h.nextStart()
	start := clk.Now()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: start, PID: 1})
	clk.Advance(4 * time.Second)
	h.report(s.AttemptID, 1, 0.5)
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(45 * time.Second), Lost: true})
	check(s, start, 4*time.Second)

	// 2. Noticed by a server restarted after a 45 s outage.
	s = h.nextStart()
	start = clk.Now()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: start, PID: 2})
	clk.Advance(4 * time.Second)
	h.report(s.AttemptID, 1, 0.5)
	h.eventually("the attempt to run", func() bool {
		as := h.attempts(s.TrialID)
		return as[len(as)-1].State == virga.AttemptRunning
	})
	h.crash()
	clk.Advance(45 * time.Second)
	h.start(&adoptingBackend{newFakeBackend()})
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Now(), Lost: true})
	check(s, start, 4*time.Second)

	// 3. The backend saw it run 6 s after its last report.
	s = h.nextStart()
	start = clk.Now()
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Started, Time: start, PID: 3})
	clk.Advance(4 * time.Second)
	h.report(s.AttemptID, 1, 0.5)
	h.be.emit(backend.Event{AttemptID: s.AttemptID, Kind: backend.Exited, Time: clk.Advance(45 * time.Second), Lost: true,
		LastSeen: start.Add(10 * time.Second)})
	check(s, start, 10*time.Second)
}
