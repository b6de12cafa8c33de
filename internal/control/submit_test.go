package control_test

import (
	"context"
	"errors"
	"testing"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/store"
)

// TestSubmittedEstimateSurvivesACrash: once a submission is answered, the
// experiment's estimate and its creation are stored, even if the process
// dies at once (here: every write after the one that inserts the
// experiment fails, so nothing a later pass would write is kept).
func TestSubmittedEstimateSurvivesACrash(t *testing.T) {
	h := newHarness(t)
	h.start(newFakeBackend())
	h.st.dieAfterInsert.Store(true)
	est := `{"steps_per_trial": 10, "step_time": 60000000000, "plans": []}`
	e, err := h.ctl.SubmitWithEstimate(context.Background(), "exp.yaml", []byte(expYAML("crash", "max_trials: 2\n")), []byte(est))
	if err != nil {
		t.Fatalf("SubmitWithEstimate: %v", err)
	}
	// The loop's next write fails: it stops with that error.
	h.cancel()
	if err := <-h.runErr; err != nil && !errors.Is(err, errDied) && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
	h.cancel = nil
	h.be.Close()

	evs, err := h.st.Store.Events(context.Background(), store.EventFilter{ExperimentID: e.ID})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[virga.EventKind]string{}
	for _, ev := range evs {
		kinds[ev.Kind] = ev.Message
	}
	if got := kinds[virga.EventExperimentEstimate]; got != est {
		t.Errorf("estimate stored with experiment %d: %q; want %q (events: %v)", e.ID, got, est, evs)
	}
	if _, ok := kinds[virga.EventExperimentCreated]; !ok {
		t.Errorf("no %s event stored with experiment %d (events: %v)", virga.EventExperimentCreated, e.ID, evs)
	}
}
