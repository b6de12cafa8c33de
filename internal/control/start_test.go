package control_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// failingBackend refuses every start with an error of the trial's own (not
// capacity), counting the tries.
type failingBackend struct {
	*fakeBackend
	tries atomic.Int64
}

func (f *failingBackend) fake() *fakeBackend { return f.fakeBackend }

func (f *failingBackend) Start(ctx context.Context, s *backend.StartSpec) error {
	f.tries.Add(1)
	return errors.New("exec: no such file")
}

// TestStartThatAlwaysFailsEndsTheTrial: a start that fails every time counts
// as a failed attempt, with a pause between tries, so the trial fails after
// max_restarts instead of looping.
func TestStartThatAlwaysFailsEndsTheTrial(t *testing.T) {
	h := newHarness(t)
	h.tick = time.Second
	be := &failingBackend{fakeBackend: newFakeBackend()}
	h.start(be)
	e := h.submit(expYAML("nostart", "max_trials: 1\nmax_restarts: 2"))
	for try := int64(1); try <= 2; try++ {
		// The failure comes back in the next pass; the retry waits a tick.
		h.step()
		h.step()
		if n := be.tries.Load(); n != try {
			t.Fatalf("%d starts tried before the pause ended, want %d", n, try)
		}
		h.advance(h.tick)
	}
	if got := h.waitExp(e.ID, virga.ExperimentFailed); got.Reason != virga.ReasonAllTrialsFailed {
		t.Errorf("experiment reason %q, want %q", got.Reason, virga.ReasonAllTrialsFailed)
	}
	ts := h.trials(e.ID)
	if len(ts) != 1 || ts[0].State != virga.TrialFailed || !strings.Contains(ts[0].Message, "could not start") {
		t.Fatalf("trials %+v; want one FAILED trial saying it could not start", ts)
	}
	if n := be.tries.Load(); n != 3 {
		t.Errorf("%d starts tried, want 3 (1 + max_restarts 2)", n)
	}
}

// sizedBackend is a fake backend with a fixed total capacity.
type sizedBackend struct{ *fakeBackend }

func (s sizedBackend) fake() *fakeBackend { return s.fakeBackend }

func (sizedBackend) Capacity() virga.Resources { return virga.Resources{CPU: 2, MemoryMB: 1024} }

// TestTrialThatCannotFitFailsTheExperiment: trials bigger than the backend
// can ever offer fail the experiment with a message saying both sizes.
func TestTrialThatCannotFitFailsTheExperiment(t *testing.T) {
	h := newHarness(t)
	h.start(sizedBackend{newFakeBackend()})
	e := h.submit(expYAML("toobig", "max_trials: 2\nresources: {cpu: 4}"))
	got := h.waitExp(e.ID, virga.ExperimentFailed)
	if !strings.Contains(got.Message, "cpu 4") || !strings.Contains(got.Message, "cpu 2") {
		t.Errorf("message %q; want it to name what a trial needs and what the backend has", got.Message)
	}
}

// TestUnschedulableExperimentEndsItsTrials: a server restarted with less
// capacity than a trial needs fails the experiment as unschedulable, and the
// trial that was waiting to restart ends with it (STOPPED, reason
// Unschedulable) instead of staying QUEUED under a FAILED experiment forever.
func TestUnschedulableExperimentEndsItsTrials(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("shrunk", "max_trials: 1\nmax_restarts: 3\nresources: {cpu: 4}"))
	s := h.nextStart()
	h.started(s)
	h.crash()
	h.start(sizedBackend{newFakeBackend()}) // 2 CPUs: the attempt is lost, the trial can never start again
	got := h.waitExp(e.ID, virga.ExperimentFailed)
	if got.Reason != virga.ReasonUnschedulable {
		t.Fatalf("experiment reason %q, want %q", got.Reason, virga.ReasonUnschedulable)
	}
	for _, tr := range h.trials(e.ID) {
		if tr.State != virga.TrialStopped || tr.Reason != virga.ReasonUnschedulable {
			t.Errorf("trial %d %s (%s, %q); want STOPPED with reason Unschedulable", tr.ID, tr.State, tr.Reason, tr.Message)
		}
	}
}
