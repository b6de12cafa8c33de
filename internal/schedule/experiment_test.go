package schedule

import (
	"math"
	"slices"
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
	// the cheapest spot pool with room (Virga once some of the search is
	// done: TestVirgaStartsOnDemandWhileNothingIsKnown).
	for _, p := range ExperimentPolicies() {
		e := exp(0, 48*time.Hour, waitingTrials(6)...)
		e.Done = 10 * time.Hour
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
		if p.Name() == "virga" {
			e.Done = 10 * time.Hour // (UP's line would be 50h by then)
		}
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
	// for every policy: trials on spot move, waiting ones start there.
	ts := []Trial{{ID: 1, Pool: 0, Left: time.Hour}, {ID: 2, Pool: -1, Left: time.Hour}}
	for _, p := range ExperimentPolicies() {
		e := exp(0, 4*time.Hour+50*time.Minute, ts...)
		e.Done = 100 * time.Hour
		e.Margin = 0.25
		if !e.MustOnDemand() {
			t.Fatal("the net should fire")
		}
		got := place(p, e)
		if diff := cmp.Diff([]Move{{1, 2}, {2, 2}}, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", p.Name(), diff)
		}
	}
	// Committed stays committed.
	e := exp(0, 100*time.Hour, ts...)
	e.Committed = true
	if !e.MustOnDemand() || e.NearDeadline() {
		t.Error("a committed experiment stays on on-demand capacity, near its deadline or not")
	}
	if diff := cmp.Diff([]Move{{1, 2}, {2, 2}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("virga, committed (-want +got):\n%s", diff)
	}
	if e.Committed, e.Deadline = false, 0; e.MustOnDemand() {
		t.Error("no deadline, no net")
	}
}

func TestVirgaStartsOnDemandWhileNothingIsKnown(t *testing.T) {
	// Nothing done yet: the estimate rests on no measurement, and Virga
	// runs on on-demand capacity however loose the deadline; spot once a
	// part of the search is done.
	e := exp(0, 48*time.Hour, waitingTrials(2)...)
	if m := e.UncertainMargin(); !math.IsInf(m, 1) {
		t.Errorf("margin with nothing done: %g, want +Inf", m)
	}
	if diff := cmp.Diff([]Move{{1, 2}, {2, 2}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("nothing done (-want +got):\n%s", diff)
	}
	e.Done = 10 * time.Hour
	if diff := cmp.Diff([]Move{{1, 1}, {2, 1}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("10h done (-want +got):\n%s", diff)
	}
}

func TestVirgaKeepsATrialOnDemandUntilItsRung(t *testing.T) {
	// Enough of the search is done for spot capacity (as in
	// TestVirgaStartsOnDemandWhileNothingIsKnown), and two trials run on
	// on-demand capacity, at a checkpoint. The one past its last rung
	// moves to spot capacity; the one the searcher may still pause at a
	// rung (promote mode) stays until that rung, where it leaves its node
	// anyway if paused, rather than pay a restart to save a few steps' price.
	e := exp(0, 48*time.Hour,
		Trial{ID: 1, Pool: 2, Left: 2 * time.Hour, Final: true},
		Trial{ID: 2, Pool: 2, Left: 2 * time.Hour, PauseAhead: true},
	)
	e.Done = 10 * time.Hour
	if diff := cmp.Diff([]Move{{1, 1}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	// A trial no rung pauses (no rungs, or stop mode) is Final's case.
	e.Trials[1].PauseAhead = false
	if diff := cmp.Diff([]Move{{1, 1}, {2, 1}}, place(&ExpPlanned{}, e)); diff != "" {
		t.Errorf("no pause ahead (-want +got):\n%s", diff)
	}
}

func TestPauseAhead(t *testing.T) {
	// Rungs at 1, 3 and 9 of 27: in promote mode a trial short of the last
	// rung may be paused ahead; in stop mode, or without rungs, none is.
	e := &spec.Experiment{MaxTrials: 10, Searcher: spec.Searcher{Name: "random", Stopper: "asha",
		Settings: map[string]any{"min_resource": int64(1), "max_resource": int64(27), "reduction_factor": int64(3)}}}
	for _, c := range []struct {
		mode string
		step int64
		want bool
	}{{"promote", 0, true}, {"promote", 8, true}, {"promote", 9, false}, {"promote", 20, false}, {"stop", 0, false}, {"", 0, false}} {
		e.Searcher.Stopper, e.Searcher.Settings["mode"] = "asha", c.mode
		if c.mode == "" {
			e.Searcher.Stopper = ""
		}
		if got := ShapeOf(e, 27).PauseAhead(c.step); got != c.want {
			t.Errorf("mode %q, step %d: %v, want %v", c.mode, c.step, got, c.want)
		}
	}
}

func TestVirgaMarginGrowsWithUncertainty(t *testing.T) {
	// The same 4h needed on on-demand (10h left, 2h chain, 4 lanes) and
	// 5h40m to the deadline: 42% of slack. Early in the search (1h done of
	// 11h) the margin is 0.25 + 0.06 x sqrt(10) = 0.44 and Virga runs on
	// on-demand capacity; late (90h done of 100h), 0.25 + 0.06 x
	// sqrt(1/9) = 0.27, and spot capacity is worth it. The baselines'
	// net, at 0.25, fires in neither.
	for _, c := range []struct {
		done time.Duration
		pool int
	}{{time.Hour, 2}, {90 * time.Hour, 1}} {
		e := exp(0, 5*time.Hour+40*time.Minute, waitingTrials(2)...)
		e.Done = c.done
		if e.MustOnDemand() {
			t.Fatal("the baselines' net should not fire")
		}
		if m, lo := e.UncertainMargin(), DefaultMargin; m <= lo || m > lo+Spread*math.Sqrt(float64(e.Left)/float64(e.Done))+1e-9 {
			t.Errorf("done %s: margin %g", c.done, m)
		}
		want := []Move{{1, c.pool}, {2, c.pool}}
		if diff := cmp.Diff(want, place(&ExpPlanned{}, e)); diff != "" {
			t.Errorf("done %s (-want +got):\n%s", c.done, diff)
		}
	}
}

func TestVirgaGivesOnDemandToPromotedTrials(t *testing.T) {
	// Spot capacity is down, one on-demand slot is free, and the deadline
	// comes near enough for the lanes to ask for on-demand capacity: the
	// slot goes to the Final (promoted) trial, not to the trials still
	// exploring before it in the queue.
	e := exp(time.Hour, 0,
		Trial{ID: 1, Pool: -1, Left: 30 * time.Minute},
		Trial{ID: 2, Pool: -1, Left: 30 * time.Minute},
		Trial{ID: 3, Pool: -1, Left: 2 * time.Hour, Final: true},
	)
	e.Done = 50 * time.Hour
	e.Pools[0].Up, e.Pools[1].Up = false, false
	e.Pools[2].Free = 1
	for d := 6*time.Hour + 50*time.Minute; d > time.Hour; d -= time.Minute {
		e.Deadline = d
		got := place(&ExpPlanned{}, e)
		if len(got) == 0 {
			continue // the lanes wait for spot capacity
		}
		if diff := cmp.Diff([]Move{{3, 2}}, got); diff != "" {
			t.Errorf("deadline %s (-want +got):\n%s", d, diff)
		}
		return
	}
	t.Fatal("the lanes never asked for on-demand capacity")
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

// Uniform Progress keeps trials on on-demand capacity while no spot pool has
// room, however far ahead of the line the experiment is.
func TestExpUniformProgressKeepsOnDemandInAnOutage(t *testing.T) {
	e := exp(time.Hour, 100*time.Hour, Trial{ID: 1, Pool: 2}, Trial{ID: 2, Pool: 2})
	e.Done = 50 * time.Hour
	e.Pools[0].Up, e.Pools[1].Up = false, false
	for _, u := range []ExpUniformProgress{{}, {Plain: true}} {
		if got := place(u, e); len(got) != 0 {
			t.Errorf("%s: moves %v, want the trials kept on on-demand capacity", u.Name(), got)
		}
	}
}

// The hysteresis is two restart overheads of time on the line, not two
// restart overheads of work per lane.
func TestExpUniformProgressHysteresisInTime(t *testing.T) {
	// J = 20h of work due at 10h: the line rises 2h of work an hour. At 5h
	// with d = 3m the threshold is the line at 5h06m, 10h12m of work (and
	// 2 x 3m x 4 lanes = 24m of work above the line before).
	e := exp(5*time.Hour, 10*time.Hour, Trial{ID: 1, Pool: 2})
	e.Chain = 0 // far from the safety net
	e.Done = 10*time.Hour + 15*time.Minute
	e.Left = 20*time.Hour - e.Done
	if diff := cmp.Diff([]Move{{1, 1}}, place(ExpUniformProgress{}, e)); diff != "" {
		t.Errorf("done 10h15m > 10h12m, spot up (-want +got):\n%s", diff)
	}
	e.Done = 10*time.Hour + 12*time.Minute
	e.Left = 20*time.Hour - e.Done
	if got := place(ExpUniformProgress{}, e); len(got) != 0 {
		t.Errorf("done 10h12m, not above the threshold: moves %v, want none", got)
	}
	// Without the hysteresis it moves even behind the line.
	e.Done = 9 * time.Hour
	e.Left = 20*time.Hour - e.Done
	if diff := cmp.Diff([]Move{{1, 1}}, place(ExpUniformProgress{Plain: true}, e)); diff != "" {
		t.Errorf("plain, behind the line, spot up (-want +got):\n%s", diff)
	}
}

func TestShape(t *testing.T) {
	asha := &spec.Experiment{MaxTrials: 100, Searcher: spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
		Settings: map[string]any{"max_resource": int64(27), "mode": "promote", "min_resource": int64(1)}}}
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
		Settings: map[string]any{"max_resource": int64(9), "min_resource": int64(1)}}}
	s = ShapeOf(hb, 9)
	if len(s.Brackets) != 3 || s.Brackets[0].Min != 1 || s.Brackets[2].Min != 9 {
		t.Errorf("hyperband brackets %+v", s.Brackets)
	}
	if got := s.StepsPerTrial(nil); got <= 1 || got >= 9 {
		t.Errorf("hyperband steps per trial %g, want between 1 and 9", got)
	}
	// Without min_resource, the rungs start where the searcher's do: its
	// default grace period (3 of 27; reduction_factor without max_resource).
	delete(asha.Searcher.Settings, "min_resource")
	if got := ShapeOf(asha, 30).Rungs; !slices.Equal(got, []int64{3, 9}) {
		t.Errorf("default rungs %v, want [3 9]", got)
	}
	delete(asha.Searcher.Settings, "max_resource")
	if got := ShapeOf(asha, 30).Rungs; !slices.Equal(got, []int64{3, 9, 27}) {
		t.Errorf("default rungs without max_resource %v, want [3 9 27]", got)
	}
	if ShapeOf(&spec.Experiment{Searcher: spec.Searcher{Name: "tpe+median", Sampler: "tpe", Stopper: "median"}}, 5).Measured != true {
		t.Error("median: the steps per trial are measured")
	}
}
