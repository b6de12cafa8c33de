package control_test

import (
	"context"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/backend"
)

// StepEvents hands backend events to the pass it makes, in order: when it
// returns, they have been handled, committed and acted on, with nothing
// read from the backend's channel.
func TestStepEventsHandlesItsEvents(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	e := h.submit(expYAML("direct", "max_trials: 1\nmax_restarts: 0"))
	s := h.nextStart()
	ctx := context.Background()
	if err := h.ctl.StepEvents(ctx, []backend.Event{{AttemptID: s.AttemptID, Kind: backend.Started, Time: h.clk.Now(), PID: 7}}); err != nil {
		t.Fatal(err)
	}
	if as := h.attempts(s.TrialID); len(as) != 1 || as[0].State != virga.AttemptRunning || as[0].PID != 7 {
		t.Fatalf("after StepEvents(Started): attempts %+v, want one running with pid 7", as)
	}
	h.report(s.AttemptID, 1, 0.5)
	zero := 0
	if err := h.ctl.StepEvents(ctx, []backend.Event{{AttemptID: s.AttemptID, Kind: backend.Exited, Time: h.clk.Now(), ExitCode: &zero}}); err != nil {
		t.Fatal(err)
	}
	if got := h.exp(e.ID); got.State != virga.ExperimentCompleted {
		t.Errorf("after StepEvents(Exited 0): experiment %s, want COMPLETED", got.State)
	}
}
