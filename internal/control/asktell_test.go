package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/api/wire"
	"github.com/virga-ml/virga/internal/search"
)

const apiDrivenYAML = `name: asktell
hyperparameters:
  x: {type: float, min: 0, max: 1}
searcher: random
objective: {metric: loss, direction: minimize}
seed: 9
`

// TestAskTell asks for trials of an API-driven experiment and ends them with
// Tell. The attempts Ask creates are the API's own: no process, no backend.
func TestAskTell(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(apiDrivenYAML + "max_trials: 2\n")
	ctx := context.Background()
	for i := range 2 {
		a, err := h.ctl.Ask(ctx, e.ID)
		if err != nil {
			t.Fatalf("ask %d: %v", i, err)
		}
		if as := h.attempts(a.Trial.ID); len(as) != 1 || as[0].Backend != "api" || as[0].State != virga.AttemptRunning {
			t.Errorf("asked attempt %+v, want backend api, RUNNING", as[0])
		}
		h.report(a.AttemptID, 0, float64(i))
		tr, err := h.ctl.Tell(ctx, a.AttemptID, true)
		if err != nil {
			t.Fatalf("tell %d: %v", i, err)
		}
		if tr.State != virga.TrialCompleted {
			t.Errorf("told trial is %s, want COMPLETED", tr.State)
		}
	}
	h.noStart()
	// The last Tell completed the experiment: Ask says the search is over or the experiment ended (both 409).
	if _, err := h.ctl.Ask(ctx, e.ID); !errors.Is(err, search.ErrExhausted) && !errors.Is(err, virga.ErrConflict) {
		t.Errorf("ask past max_trials: %v, want ErrExhausted", err)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestTellFailureRetriesTrial: a failed Tell is retried up to max_restarts,
// so the next Ask must hand out the same trial again (and the experiment must
// be able to finish).
func TestTellFailureRetriesTrial(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(apiDrivenYAML + "max_trials: 1\nmax_restarts: 1\n")
	ctx := context.Background()
	a, err := h.ctl.Ask(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.Tell(ctx, a.AttemptID, false); err != nil {
		t.Fatalf("tell: %v", err)
	}
	b, err := h.ctl.Ask(ctx, e.ID)
	if err != nil {
		tr := h.trial(a.Trial.ID)
		t.Fatalf("ask after a failed tell: %v; trial %d is %s (%q) and experiment %s can never finish",
			err, tr.ID, tr.State, tr.Message, h.exp(e.ID).State)
	}
	if b.Trial.ID != a.Trial.ID || b.AttemptID == a.AttemptID {
		t.Fatalf("ask after a failed tell gave trial %d attempt %d, want trial %d again", b.Trial.ID, b.AttemptID, a.Trial.ID)
	}
	h.report(b.AttemptID, 0, 0.5)
	if _, err := h.ctl.Tell(ctx, b.AttemptID, true); err != nil {
		t.Fatal(err)
	}
	// The last Tell completed the experiment: Ask says the search is over or the experiment ended (both 409).
	if _, err := h.ctl.Ask(ctx, e.ID); !errors.Is(err, search.ErrExhausted) && !errors.Is(err, virga.ErrConflict) {
		t.Errorf("ask past max_trials: %v", err)
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}

// TestStopAPIDrivenExperiment stops an API-driven experiment with a trial
// out: there is no process to wait for, so it stops at once.
func TestStopAPIDrivenExperiment(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(apiDrivenYAML + "max_trials: 3\n")
	a, err := h.ctl.Ask(context.Background(), e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ctl.Control(context.Background(), e.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	h.eventually("the experiment to stop", func() bool { return h.exp(e.ID).State == virga.ExperimentStopped })
	if tr := h.trial(a.Trial.ID); tr.State != virga.TrialStopped {
		t.Errorf("trial %s, want STOPPED", tr.State)
	}
	if h.be.stopped(a.AttemptID) {
		t.Errorf("the backend was asked to stop API attempt %d", a.AttemptID)
	}
}

// TestConcurrentAsks: asks batched into one pass of the loop each get their
// own trial, and every one is answered.
func TestConcurrentAsks(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(apiDrivenYAML + "max_trials: 40\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type got struct {
		a   wire.Asked
		err error
	}
	results := make(chan got, 40)
	for range 8 {
		go func() {
			for range 5 {
				a, err := h.ctl.Ask(ctx, e.ID)
				if err == nil {
					_, err = h.ctl.Report(ctx, a.AttemptID, wire.Report{Metrics: map[string]float64{"loss": a.Trial.HParams["x"].(float64)}})
				}
				if err == nil {
					_, err = h.ctl.Tell(ctx, a.AttemptID, true)
				}
				results <- got{a, err}
			}
		}()
	}
	seen := map[int64]bool{}
	for range 40 {
		r := <-results
		if r.err != nil {
			t.Fatalf("ask/tell: %v", r.err)
		}
		if seen[r.a.Trial.ID] {
			t.Fatalf("trial %d was handed out twice", r.a.Trial.ID)
		}
		seen[r.a.Trial.ID] = true
	}
	h.waitExp(e.ID, virga.ExperimentCompleted)
}
