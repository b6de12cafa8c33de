package schedule

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga/internal/spec"
)

// exp is an experiment snapshot: two spot pools (cheap, then cheaper but
// less available) and one on-demand pool, four lanes, 10h of work left of
// which 2h in sequence, and the given trials.
func exp(elapsed, deadline time.Duration, trials ...Trial) *Experiment {
	return &Experiment{
		Elapsed: elapsed, Deadline: deadline, Tick: time.Minute, Checkpoint: 5 * time.Minute, Lanes: 4,
		Left: 10 * time.Hour, Chain: 2 * time.Hour, Trials: trials,
		Pools: []Pool{
			{Name: "spot-a", Spot: true, Slots: 4, Free: 4, Up: true, Price: 1, Overhead: 3 * time.Minute,
				Stats: PoolStats{Available: 0.6, MeanUp: 3 * time.Hour, MeanDown: 2 * time.Hour}},
			{Name: "spot-b", Spot: true, Slots: 4, Free: 4, Up: true, Price: 0.9, Overhead: 3 * time.Minute,
				Stats: PoolStats{Available: 0.2, MeanUp: time.Hour, MeanDown: 4 * time.Hour}},
			{Name: "od", Slots: 4, Free: 4, Up: true, Price: 3, Overhead: 3 * time.Minute},
		},
	}
}

func waitingTrials(n int) []Trial {
	ts := make([]Trial, n)
	for i := range ts {
		ts[i] = Trial{ID: int64(i + 1), Pool: -1, Left: 2 * time.Hour}
	}
	return ts
}

// place runs a policy and keeps the feasible moves.
func place(p ExperimentPolicy, e *Experiment) []Move {
	return Feasible(e, p.Place(e, nil))
}

func TestFeasible(t *testing.T) {
	e := exp(0, 0, Trial{ID: 1, Pool: -1}, Trial{ID: 2, Pool: -1}, Trial{ID: 3, Pool: 0}, Trial{ID: 4, Pool: -1})
	e.Pools[0].Free = 1
	e.Pools[1].Up = false
	e.Pools[2].Reclaiming = true // (an on-demand pool never is; a stand-in)
	moves := []Move{
		{1, 0}, // takes spot-a's last slot
		{2, 0}, // none left
		{2, 1}, // spot-b is down
		{2, 2}, // reclaiming
		{3, 0}, // already there
		{3, -1},
		{3, -1}, // moved twice
		{4, 0},  // the slot trial 3 gave back
		{9, 0},  // no such trial
		{1, -1}, // moved twice
	}
	got := Feasible(e, moves)
	want := []Move{{1, 0}, {3, -1}, {4, 0}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Feasible (-want +got):\n%s", diff)
	}

	// A budget refuses starts whose least cost does not fit.
	e = exp(0, 0, waitingTrials(3)...)
	e.Budget, e.Spent = 10, 9
	for i := range e.Pools {
		e.Pools[i].MinCost = 0.4
	}
	got = Feasible(e, []Move{{1, 2}, {2, 2}, {3, 0}})
	if diff := cmp.Diff([]Move{{1, 2}, {2, 2}}, got); diff != "" {
		t.Errorf("Feasible with a budget (-want +got):\n%s", diff)
	}
}

func TestPoliciesWithSpotUp(t *testing.T) {
	// Plenty of time: every policy but on-demand-only starts each trial on
	// the cheapest spot pool with room.
	for _, p := range ExperimentPolicies() {
		e := exp(0, 48*time.Hour, waitingTrials(6)...)
		got := place(p, e)
		want := []Move{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 0}, {6, 0}}
		if p.Name() == "on-demand" {
			want = []Move{{1, 2}, {2, 2}, {3, 2}, {4, 2}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p.Name(), diff)
		}
	}
}

func TestPoliciesWithSpotDown(t *testing.T) {
	// No spot capacity, a loose deadline: greedy and Virga wait; Uniform
	// Progress is behind the line (no work done at 4h of 48h) and starts
	// trials on on-demand capacity.
	for _, p := range ExperimentPolicies() {
		e := exp(4*time.Hour, 48*time.Hour, waitingTrials(2)...)
		e.Pools[0].Up, e.Pools[1].Up = false, false
		got := place(p, e)
		var want []Move
		if p.Name() == "on-demand" || p.Name() == "uniform-progress" {
			want = []Move{{1, 2}, {2, 2}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p.Name(), diff)
		}
	}
}

func TestSafetyNetMovesEveryTrial(t *testing.T) {
	// 10h of work on 4 lanes with a 2h chain is (10h-2h)/4+2h = 4h on
	// on-demand; with the margin, 5h. At 4h50m to the deadline the net fires
	// for every policy: trials on spot move, waiting ones start there; Virga
	// keeps exploring on spot capacity while half the margin is left.
	ts := []Trial{{ID: 1, Pool: 0, Left: time.Hour}, {ID: 2, Pool: -1, Left: time.Hour}}
	for _, p := range ExperimentPolicies() {
		e := exp(0, 4*time.Hour+50*time.Minute, ts...)
		e.Margin = 0.25
		if !e.MustOnDemand() {
			t.Fatal("the net should fire")
		}
		got := place(p, e)
		want := []Move{{1, 2}, {2, 2}}
		if p.Name() == "virga" {
			// Near the deadline Virga keeps exploration on spot capacity
			// while the slack without the margin allows.
			want = []Move{{2, 1}}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p.Name(), diff)
		}
	}
	// Closer, Virga too moves everything.
	e := exp(0, 4*time.Hour+25*time.Minute, ts...)
	if diff := cmp.Diff([]Move{{1, 2}, {2, 2}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("virga at the edge (-want +got):\n%s", diff)
	}
	// Committed stays committed.
	e = exp(0, 100*time.Hour, ts...)
	e.Committed = true
	if !e.MustOnDemand() || e.NearDeadline() {
		t.Error("a committed experiment stays on on-demand capacity, near its deadline or not")
	}
	if e.Committed, e.Deadline = false, 0; e.MustOnDemand() {
		t.Error("no deadline, no net")
	}
}

func TestVirgaGivesOnDemandToPromotedTrials(t *testing.T) {
	// Near the deadline (the net has fired, slack remains), a Final trial
	// goes to on-demand capacity, an exploring one to spot; a Final trial
	// on spot moves at its checkpoint, not before.
	e := exp(0, 100*time.Hour,
		Trial{ID: 1, Pool: -1, Left: 30 * time.Minute},
		Trial{ID: 2, Pool: -1, Left: 2 * time.Hour, Final: true},
		Trial{ID: 3, Pool: 0, Left: 2 * time.Hour, Final: true, Unsaved: time.Minute},
		Trial{ID: 4, Pool: 0, Left: 2 * time.Hour, Final: true},
	)
	// 6.5h needed: 8h8m with the margin, 7h19m with half of it.
	e.Left, e.Chain = 20*time.Hour, 2*time.Hour
	e.Deadline = 7*time.Hour + 45*time.Minute
	got := place(&ExpPlanned{}, e)
	want := []Move{{1, 1}, {2, 2}, {4, 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLeavingOnDemandWaitsForACheckpoint(t *testing.T) {
	// Far ahead of the line with spot capacity up: Uniform Progress moves a
	// trial off on-demand capacity only at a checkpoint.
	e := exp(time.Hour, 100*time.Hour,
		Trial{ID: 1, Pool: 2, Unsaved: 2 * time.Minute},
		Trial{ID: 2, Pool: 2},
	)
	e.Done = 50 * time.Hour
	got := place(ExpUniformProgress{}, e)
	if diff := cmp.Diff([]Move{{2, 1}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestShape(t *testing.T) {
	asha := &spec.Experiment{MaxTrials: 100, Searcher: spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
		Settings: map[string]any{"max_resource": int64(27), "mode": "promote"}}}
	s := ShapeOf(asha, 30)
	if diff := cmp.Diff([]int64{1, 3, 9}, s.Rungs); diff != "" || s.Steps != 27 || !s.Promote {
		t.Fatalf("rungs (-want +got):\n%s; steps %d promote %v", diff, s.Steps, s.Promote)
	}
	// 1 + 2/3 + 6/9 + 18/27 steps, 1 + 1/3 + 1/9 + 1/27 attempts.
	if got := s.StepsPerTrial(nil); got < 3-1e-12 || got > 3+1e-12 {
		t.Errorf("steps per trial %g, want 3", got)
	}
	if got, want := s.AttemptsPerTrial(nil), 1+1/3.0+1/9.0+1/27.0; got-want > 1e-12 || want-got > 1e-12 {
		t.Errorf("attempts per trial %g, want %g", got, want)
	}
	for step, want := range map[int64]int64{0: 1, 1: 3, 2: 3, 3: 9, 9: 27, 26: 27} {
		if got := s.NextStop(step); got != want {
			t.Errorf("NextStop(%d) = %d, want %d", step, got, want)
		}
	}
	if s.Final(8) || !s.Final(9) {
		t.Error("Final: a trial is final from the last rung on")
	}

	// Measured survival overrides the prior as trials pass rungs.
	keep := s.Survival(Progress{Reached: []int{1000, 500, 250}, Passed: []int{500, 250, 125}})
	for k, f := range keep {
		if f < 0.49 || f > 0.51 {
			t.Errorf("survival at rung %d: %g, want about 0.5", k, f)
		}
	}

	// Without a stopper every trial runs to its end, and the chain while
	// trials remain to be created is a whole trial.
	random := &spec.Experiment{MaxTrials: 10, Searcher: spec.Searcher{Name: "random", Sampler: "random"}}
	s = ShapeOf(random, 20)
	left, chain := s.EstimateWork(Progress{Steps: 50, Live: []LiveTrial{{Step: 5, StepTime: 2 * time.Minute}}, StepTime: time.Minute})
	// 15 steps of the live trial at 2m, then 200-50-15 steps at 1m.
	if left != 30*time.Minute+135*time.Minute || chain != 30*time.Minute {
		t.Errorf("random: left %s chain %s, want 2h45m0s and 30m0s", left, chain)
	}
	left, chain = s.EstimateWork(Progress{Steps: 50, Live: []LiveTrial{{Step: 5}}, StepTime: time.Minute, Exhausted: true})
	if left != 15*time.Minute || chain != 15*time.Minute {
		t.Errorf("random, exhausted: left %s chain %s, want 15m0s and 15m0s", left, chain)
	}

	hb := &spec.Experiment{MaxTrials: 10, Searcher: spec.Searcher{Name: "random+hyperband", Sampler: "random", Stopper: "hyperband",
		Settings: map[string]any{"max_resource": int64(9)}}}
	s = ShapeOf(hb, 9)
	if len(s.Brackets) != 3 || s.Brackets[0].Min != 1 || s.Brackets[2].Min != 9 {
		t.Errorf("hyperband brackets %+v", s.Brackets)
	}
	if got := s.StepsPerTrial(nil); got <= 1 || got >= 9 {
		t.Errorf("hyperband steps per trial %g, want between 1 and 9", got)
	}
	if ShapeOf(&spec.Experiment{Searcher: spec.Searcher{Name: "tpe+median", Sampler: "tpe", Stopper: "median"}}, 5).Measured != true {
		t.Error("median: the steps per trial are measured")
	}
}
