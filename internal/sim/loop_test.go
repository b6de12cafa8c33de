package sim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/schedule"
)

// loopRun is smallRun on the control loop (RunLoop).
func loopRun(t *testing.T, src string, cfg ExperimentConfig) *ExperimentResult {
	t.Helper()
	r, err := RunLoop(smallConfig(t, src, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// On on-demand capacity the control loop and the legacy simulator agree on
// everything they both measure, and a run on the loop repeats exactly.
func TestLoopOnDemandRun(t *testing.T) {
	cfg := ExperimentConfig{Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}}
	old, err := runLegacy(smallConfig(t, smallExperiment, cfg))
	if err != nil {
		t.Fatal(err)
	}
	r := loopRun(t, smallExperiment, cfg)
	// Events and decisions count different things (backend events and loop
	// passes on the loop).
	ignore := cmpopts.IgnoreFields(ExperimentResult{}, "Events", "Decisions")
	if diff := cmp.Diff(old, r, ignore, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("legacy and loop differ (-legacy +loop):\n%s", diff)
	}
	if r.Decisions == 0 || r.Events != 8 {
		t.Errorf("passes %d, events %d: want some, and 8 (a start and an exit per attempt)", r.Decisions, r.Events)
	}
	// The outcome repeats exactly. The count of loop passes does not: it
	// is how many of the backend's wake-ups one pass took in together,
	// which depends on goroutine scheduling (a wake-up that lands during a
	// pass makes one more pass, with nothing new to decide).
	again := loopRun(t, smallExperiment, cfg)
	if diff := cmp.Diff(r, again, cmpopts.IgnoreFields(ExperimentResult{}, "Decisions")); diff != "" {
		t.Errorf("a second run differs (-first +second):\n%s", diff)
	}
}

// smallConfig is cfg for the small experiment on the small table.
func smallConfig(t testing.TB, src string, cfg ExperimentConfig) ExperimentConfig {
	t.Helper()
	e, data := parse(t, src)
	c, err := NewCurves(smallTable(t), e, "exp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.ScaleTo(time.Minute)
	cfg.Spec, cfg.Curves, cfg.Data = e, c, data
	if cfg.Policy == nil {
		cfg.Policy = schedule.ExpOnDemandOnly{}
	}
	return cfg
}
