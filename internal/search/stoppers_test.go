package search

import (
	"fmt"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

func oneFloat(s spec.Searcher, maxTrials int) *spec.Experiment {
	return &spec.Experiment{
		Hyperparameters: map[string]*spec.Hyperparameter{"lr": {Name: "lr", Type: spec.HPFloat, Min: 0.001, Max: 1, Log: true}},
		Order:           []string{"lr"},
		Searcher:        s,
		Objective:       spec.Objective{Metric: "loss", Direction: spec.Minimize},
		MaxTrials:       maxTrials,
	}
}

// A step 0 (a value before training) and steps reported again after a
// restart from an earlier checkpoint leave the curve usable.
func TestCurveStopperToleratesStepZeroAndRepeats(t *testing.T) {
	s, err := New(oneFloat(spec.Searcher{Name: "random+curve", Sampler: "random", Stopper: "curve",
		Settings: map[string]any{"max_resource": int64(30), "min_steps": int64(4)}}, 3), 1)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := s.Propose()
	s.Created(p.ID, 1)
	for step := int64(0); step <= 6; step++ {
		s.Observe(1, step, 0.2+1/float64(step+1))
	}
	pr := s.(Predictor)
	if got := pr.Prediction(1); got == nil || got.Step != 6 {
		t.Fatalf("prediction after steps 0-6: %+v", got)
	}
	for step := int64(3); step <= 7; step++ { // restarted from the checkpoint of step 2
		s.Observe(1, step, 0.2+1/float64(step+1))
	}
	if got := pr.Prediction(1); got == nil || got.Step != 7 {
		t.Fatalf("prediction after the repeated steps: %+v", got)
	}
	if c := s.(*adaptive).stop.(*curveStopper).st.Live[1]; len(c.Steps) != 8 {
		t.Errorf("curve holds steps %v, want 0..7 once each", c.Steps)
	}
}

// A trial restarted from an earlier checkpoint counts its steps once in the
// median of completed trials.
func TestMedianCountsRerunStepsOnce(t *testing.T) {
	m := newMedian(1, 0)
	r := &record{Trial: 1, Status: running}
	for _, step := range []int64{1, 2, 3, 2, 3, 4} {
		m.report(r, step, float64(step))
	}
	r.Status, r.Complete = ended, true
	m.ended(r)
	for step, vs := range m.st.Done {
		if len(vs) != 1 {
			t.Errorf("step %d holds %v, want one value", step, vs)
		}
	}
}

// PBT never continues from a member it is replacing.
func TestPBTDoesNotPickAReplacedMember(t *testing.T) {
	s, err := New(oneFloat(spec.Searcher{Name: "pbt", Settings: map[string]any{
		"population": int64(3), "interval": int64(1), "max_resource": int64(10), "quantile": 0.5}}, 10), 1)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		p, err := s.Propose()
		if err != nil {
			t.Fatal(err)
		}
		s.Created(p.ID, id)
	}
	s.Observe(1, 1, 0.1)
	if d := s.Observe(3, 1, 0.9); d != Stop {
		t.Fatalf("worst member: %s, want stop", d)
	}
	// Trial 3 is being replaced: trial 2 is compared with trial 1 alone.
	if d := s.Observe(2, 1, 0.5); d != Stop {
		t.Fatalf("member worst among those not replaced: %s, want stop", d)
	}
	for range 2 {
		p, err := s.Propose()
		if err != nil || p.Parent != 1 {
			t.Fatalf("replacement %+v, %v: want a child of trial 1, the only strong member not being replaced", p, err)
		}
	}
}

// A snapshot taken under another max_trials (a default that changed between
// versions) goes on with the new limit unless it proposed more already.
func TestRestoreUnderAnotherLimit(t *testing.T) {
	st := spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha"}
	old, err := New(oneFloat(st, 20), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p, _ := old.Propose()
		old.Created(p.ID, int64(i+1))
	}
	snap, _ := old.Snapshot()
	bigger, _ := New(oneFloat(st, 54), 1)
	if err := bigger.Restore(snap); err != nil {
		t.Fatalf("restore under a larger limit: %v", err)
	}
	for i := 5; i < 54; i++ {
		p, err := bigger.Propose()
		if err != nil {
			t.Fatalf("proposal %d of 54: %v", i+1, err)
		}
		bigger.Created(p.ID, int64(i+1))
	}
	smaller, _ := New(oneFloat(st, 4), 1)
	if err := smaller.Restore(snap); err == nil {
		t.Fatal("a snapshot with 5 trials restored into a search of 4")
	}
}

// feed creates a trial for the next proposal and reports values at steps
// 1, 2, ...; it returns the decision at each step, stopping at the first
// that is not Continue.
func feed(t *testing.T, s Searcher, id int64, values ...float64) []Decision {
	t.Helper()
	p, err := s.Propose()
	if err != nil {
		t.Fatal(err)
	}
	s.Created(p.ID, id)
	var out []Decision
	for i, v := range values {
		d := s.Observe(id, int64(i+1), v)
		out = append(out, d)
		if d != Continue {
			return out
		}
	}
	return out
}

// TestRungsDefaultGracePeriod: without min_resource, ASHA's first rung is
// two halvings below max_resource (3 of 27), not the first report: a trial
// whose first report is the worst goes on to step 3, and is judged there.
func TestRungsDefaultGracePeriod(t *testing.T) {
	for _, stopper := range []string{"asha", "hyperband"} {
		s, err := New(oneFloat(spec.Searcher{Name: "random+" + stopper, Sampler: "random", Stopper: stopper,
			Settings: map[string]any{"max_resource": int64(27)}}, 10), 1)
		if err != nil {
			t.Fatal(err)
		}
		feed(t, s, 1, 0.1, 0.1, 0.1)
		got := feed(t, s, 2, 0.9, 0.9, 0.9)
		if len(got) < 3 {
			t.Errorf("%s: trial worse at step 1 got %v, want to go on to step 3 (the first rung)", stopper, got)
		}
	}
	// Hyperband's brackets start at 3, 9 and 27 (no bracket at step 1).
	r, err := newRungs("stop", spec.DefaultMinResource(27, 3), 27, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 9}; len(r.mins) != 3 || r.mins[0] != want[0] || r.mins[1] != want[1] {
		t.Errorf("hyperband brackets start at %v, want [3 9 27]", r.mins)
	}
}

// TestMedianDefaultWarmup: without warmup_steps, the median rule judges no
// step in the first quarter of the completed trials' length (2 of 8 steps);
// warmup_steps: 0 judges from the first step, as Optuna's default does.
func TestMedianDefaultWarmup(t *testing.T) {
	curve := []float64{2.3, 0.5, 0.4, 0.3, 0.3, 0.3, 0.3, 0.3}
	worse := []float64{2.4, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5}
	for _, tt := range []struct {
		settings map[string]any
		steps    int // steps the worse trial runs
	}{
		{map[string]any{"min_trials": int64(1)}, 3},
		{map[string]any{"min_trials": int64(1), "warmup_steps": int64(0)}, 1},
		{map[string]any{"min_trials": int64(1), "warmup_steps": int64(5)}, 5},
	} {
		s, err := New(oneFloat(spec.Searcher{Name: "random+median", Sampler: "random", Stopper: "median", Settings: tt.settings}, 10), 1)
		if err != nil {
			t.Fatal(err)
		}
		feed(t, s, 1, curve...)
		s.Ended(1, Completed)
		got := feed(t, s, 2, worse...)
		if len(got) != tt.steps || got[len(got)-1] != Stop {
			t.Errorf("%v: worse trial's decisions %v, want it stopped at step %d", tt.settings, got, tt.steps)
		}
	}
}

// TestAutoBuiltInCode: an experiment built in code with searcher auto, not
// resolved by the parser, gets the searcher the parser would give it.
func TestAutoBuiltInCode(t *testing.T) {
	for _, tt := range []struct {
		settings map[string]any
		stopper  any
	}{
		{nil, &rungs{}},
		{map[string]any{"max_resource": int64(27)}, &rungs{}},
	} {
		s, err := New(oneFloat(spec.Searcher{Name: "auto", Settings: tt.settings}, 10), 1)
		if err != nil {
			t.Fatal(err)
		}
		a, ok := s.(*adaptive)
		if !ok || fmt.Sprintf("%T", a.stop) != fmt.Sprintf("%T", tt.stopper) {
			t.Errorf("auto with %v: %T, want an adaptive searcher with a %T", tt.settings, s, tt.stopper)
		}
	}
}
