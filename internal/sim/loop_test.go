package sim

import (
	"fmt"
	"slices"
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

// recorded is an experiment policy that records what it is shown and the
// moves it makes that can be carried out.
type recorded struct {
	schedule.ExperimentPolicy
	// atCheckpoint counts the decisions that saw a trial the searcher may
	// still pause at a rung run on on-demand capacity at a checkpoint;
	// offOnDemand are the moves that took such a trial off it.
	atCheckpoint int
	offOnDemand  []string
}

func (r *recorded) Place(e *schedule.Experiment, moves []schedule.Move) []schedule.Move {
	moves = r.ExperimentPolicy.Place(e, moves)
	ahead := func(t *schedule.Trial) bool { return t.PauseAhead && t.Pool >= 0 && !e.Pools[t.Pool].Spot }
	for i := range e.Trials {
		if t := &e.Trials[i]; ahead(t) && t.AtCheckpoint() {
			r.atCheckpoint++
			break
		}
	}
	for _, m := range schedule.Feasible(e, slices.Clone(moves)) {
		for i := range e.Trials {
			if t := &e.Trials[i]; t.ID == m.Trial && ahead(t) {
				r.offOnDemand = append(r.offOnDemand, fmt.Sprintf("at %s: trial %d to pool %d", e.Elapsed, t.ID, m.Pool))
			}
		}
	}
	return moves
}

// On the loop, Virga's policy is asked at every report, so it sees trials
// at their checkpoints (the legacy simulator asks only when capacity or
// trials change, mid-step). A search in promote mode starts on on-demand
// capacity (nothing measured yet) and pauses its trials at each rung: a
// trial the searcher may still pause stays on on-demand capacity until its
// rung, where it leaves its node anyway if paused, instead of being restarted on spot
// capacity at a checkpoint before (a restart that saves a few steps' price
// and changes the order the searcher sees results in: on the capacity
// benchmark's search such moves made ASHA run a quarter more steps).
func TestLoopVirgaKeepsTrialsOnDemandUntilTheirRung(t *testing.T) {
	pol := &recorded{ExperimentPolicy: &schedule.ExpPlanned{}}
	cfg := ExperimentConfig{Pools: []*capacity.Pool{spotPool(t, 2, 0.9, 3*time.Minute, ""), onDemandPool(2, 3, 3*time.Minute)},
		Deadline: 3 * time.Hour, Policy: pol}
	r := loopRun(t, promoteExperiment, cfg)
	if !r.Met {
		t.Fatalf("deadline missed: %+v", r)
	}
	if pol.atCheckpoint == 0 {
		t.Fatal("no decision saw a trial with a pause ahead on on-demand capacity at a checkpoint: the scenario tests nothing")
	}
	if len(pol.offOnDemand) > 0 {
		t.Errorf("trials with a pause ahead moved off on-demand capacity before their rung: %v", pol.offOnDemand)
	}
}

// promoteExperiment is ASHA in promote mode on the small table: rungs at
// steps 1 and 2 of 4.
const promoteExperiment = `name: promote
hyperparameters:
  lr: {type: float, min: 0.01, max: 1, log: true}
  act: {type: categorical, values: [relu, tanh]}
searcher:
  name: random
  stopper: asha
  mode: promote
  min_resource: 1
  max_resource: 4
  reduction_factor: 2
objective: {metric: val_loss, direction: minimize}
max_trials: 8
max_concurrent: 2
resources: {cpu: 8}
seed: 3
`
