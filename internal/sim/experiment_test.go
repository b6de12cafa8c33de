package sim

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/capacity"
	"github.com/virga-ml/virga/internal/capacity/trace"
	"github.com/virga-ml/virga/internal/schedule"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// smallTable is a table of 6 configurations (lr 0.01, 0.1, 1 log-spaced x
// act relu, tanh) of 4 epochs, each epoch 1 s; lower lr and tanh are
// better.
func smallTable(t testing.TB) *replay.Table {
	t.Helper()
	tb := &replay.Table{Name: "small", Metric: "val_loss", Direction: "minimize", Epochs: 4,
		Space: []replay.Dim{
			{Name: "lr", Type: "float", Log: true, Values: []any{0.01, 0.1, 1.0}},
			{Name: "act", Type: "categorical", Values: []any{"relu", "tanh"}},
		}}
	for i, lr := range []float64{0.01, 0.1, 1} {
		for j, act := range []string{"relu", "tanh"} {
			c := replay.Config{HParams: map[string]any{"lr": lr, "act": act}}
			for e := range 4 {
				c.Curve = append(c.Curve, float64(10*i+5*j+4-e))
				c.Seconds = append(c.Seconds, 1)
			}
			tb.Configs = append(tb.Configs, c)
		}
	}
	if err := tb.Check(); err != nil {
		t.Fatal(err)
	}
	return tb
}

func parse(t testing.TB, src string) (*spec.Experiment, []byte) {
	t.Helper()
	e, err := spec.Parse("exp.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return e, []byte(src)
}

const smallExperiment = `name: small
hyperparameters:
  lr: {type: float, min: 0.01, max: 1, log: true}
  act: {type: categorical, values: [relu, tanh]}
searcher: random
objective: {metric: val_loss, direction: minimize}
max_trials: 4
max_concurrent: 2
resources: {cpu: 8}
seed: 3
`

// node is a p3.2xlarge-like node: a trial of 8 CPUs takes all of it.
var node = virga.Resources{CPU: 8, MemoryMB: 61 * 1024, GPU: 1}

func onDemandPool(nodes int, price float64, overhead time.Duration) *capacity.Pool {
	return &capacity.Pool{Name: "od", Node: node, MaxNodes: nodes, Market: spec.OnDemand, Billing: capacity.PerSecond,
		RestartOverhead: overhead, PriceSeries: capacity.Constant(price), OnDemandSeries: capacity.Constant(price)}
}

// spotPool replays pattern ('1' up, '0' down), one character a minute,
// repeating.
func spotPool(t testing.TB, nodes int, price float64, overhead time.Duration, pattern string) *capacity.Pool {
	t.Helper()
	p := &capacity.Pool{Name: "spot", Node: node, MaxNodes: nodes, Market: spec.Spot, Billing: capacity.PerSecond,
		RestartOverhead: overhead, PriceSeries: capacity.Constant(price), OnDemandSeries: capacity.Constant(3)}
	if pattern == "" {
		p.Preemption = capacity.Never()
		return p
	}
	a := &trace.Availability{Tick: time.Minute}
	for _, c := range pattern {
		a.Count = append(a.Count, int(c-'0'))
	}
	m, err := capacity.ReplayTrace(a, 1, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	p.Preemption = m
	return p
}

func TestCurvesMapping(t *testing.T) {
	tb := smallTable(t)
	e, data := parse(t, smallExperiment)
	c, err := NewCurves(tb, e, "exp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lr   any
		act  string
		want int // configuration
	}{
		{0.05, "relu", 2}, // nearer 0.1 than 0.01 in ratio
		{0.02, "tanh", 1}, // nearer 0.01
		{5.0, "relu", 4},  // past the grid: its end
		{int64(1), "tanh", 5},
		{1e-9, "relu", 0},
	} {
		got, err := c.Config(map[string]any{"lr": tc.lr, "act": tc.act})
		if err != nil || got != tc.want {
			t.Errorf("lr %v act %s: configuration %d (%v), want %d", tc.lr, tc.act, got, err, tc.want)
		}
	}
	if got := c.Steps(map[string]any{"epochs": int64(2)}); got != 2 {
		t.Errorf("epochs 2: %d steps, want 2", got)
	}
	if got := c.Steps(map[string]any{"epochs": int64(99)}); got != 4 {
		t.Errorf("epochs 99: %d steps, want the table's 4", got)
	}
	c.ScaleTo(time.Minute)
	if got := c.StepTime(0, 1); got != time.Minute {
		t.Errorf("scaled step %s, want 1m0s", got)
	}

	// Mismatches are reported at the experiment file's fields.
	bad := strings.NewReplacer("metric: val_loss", "metric: val_acc",
		"values: [relu, tanh]", "values: [relu, gelu]").Replace(smallExperiment)
	e, data = parse(t, bad)
	_, err = NewCurves(tb, e, "exp.yaml", data)
	var se *spec.Error
	if !errors.As(err, &se) {
		t.Fatalf("want a *spec.Error, got %v", err)
	}
	want := []string{
		"exp.yaml:4:28: hyperparameters.act.values: gelu is not a value the table small has for act (relu, tanh)",
		"exp.yaml:6:13: objective.metric: the table small records val_loss, not val_acc; simulate with the table's metric",
	}
	var got []string
	for _, p := range se.Problems {
		got = append(got, p.String())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	e, data = parse(t, strings.Replace(smallExperiment, "  act: {type: categorical, values: [relu, tanh]}\n", "", 1))
	if _, err := NewCurves(tb, e, "exp.yaml", data); err == nil || !strings.Contains(err.Error(), "exp.yaml:2:1: hyperparameters: the table small varies act (relu, tanh); define it") {
		t.Errorf("a dimension missing: %v", err)
	}
}

// smallRun simulates the small experiment with cfg's pools and policy.
func smallRun(t *testing.T, src string, cfg ExperimentConfig) *ExperimentResult {
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
	r, err := RunExperiment(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOnDemandRun(t *testing.T) {
	// 4 trials of 4 one-minute steps, 2 at a time, each paying a 3-minute
	// restart overhead: 2 x 7 minutes, 28 node-minutes at $3/h.
	r := smallRun(t, smallExperiment, ExperimentConfig{Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}})
	if r.End != "completed" || !r.Finished || !r.Met || r.Trials != 4 || r.Completed != 4 || r.Steps != 16 {
		t.Fatalf("got %+v", r)
	}
	if r.Makespan != 14*time.Minute || math.Abs(r.Cost-28.0/60*3) > 1e-9 || r.Work != 16*time.Minute {
		t.Errorf("makespan %s cost %g work %s, want 14m0s, 1.4 and 16m0s", r.Makespan, r.Cost, r.Work)
	}
	want := []PoolUsage{{Pool: "od", NodeHours: 28.0 / 60, Cost: 1.4, Attempts: 4}}
	if diff := cmp.Diff(want, r.Pools, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}
	if r.Best == nil || r.Best.Step != 4 || r.Best.Value != r.Best.Value {
		t.Errorf("best %+v", r.Best)
	}
	// The same run again is the same.
	again := smallRun(t, smallExperiment, ExperimentConfig{Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}})
	if diff := cmp.Diff(r, again); diff != "" {
		t.Errorf("a second run differs (-first +second):\n%s", diff)
	}
}

const oneTrial = `name: one
hyperparameters:
  lr: {type: float, min: 0.01, max: 1, log: true}
  act: tanh
searcher: random
objective: {metric: val_loss, direction: minimize}
max_trials: 1
resources: {cpu: 8}
`

func TestPreemptionLosesTheStepUnderWay(t *testing.T) {
	// Steps of 2 minutes after a 1-minute overhead: steps end at 3m and 5m,
	// but the pool is reclaimed at 4m (down 4m-6m): the second step's first
	// minute is lost. The deadline is loose: greedy waits for spot capacity.
	// Back at 6m, the trial restarts (1m), then three steps end at 9m, 11m,
	// 13m.
	pattern := "1111001111111111111111111111111111111111"
	run := func(save bool) *ExperimentResult {
		t.Helper()
		e, data := parse(t, oneTrial)
		c, err := NewCurves(smallTable(t), e, "exp.yaml", data)
		if err != nil {
			t.Fatal(err)
		}
		c.ScaleTo(2 * time.Minute)
		r, err := RunExperiment(ExperimentConfig{Spec: e, Data: data, Curves: c, Policy: schedule.ExpGreedy{}, SaveOnStop: save,
			Deadline: time.Hour, Pools: []*capacity.Pool{spotPool(t, 1, 0.6, time.Minute, pattern), onDemandPool(1, 3, time.Minute)}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := run(false)
	if r.Preemptions != 1 || r.Lost != time.Minute || r.Makespan != 13*time.Minute || r.Steps != 4 {
		t.Fatalf("preemptions %d lost %s makespan %s steps %d, want 1, 1m0s, 13m0s, 4", r.Preemptions, r.Lost, r.Makespan, r.Steps)
	}
	// 4 + 7 minutes billed at $0.6/h; the minute after the checkpoint at 3m
	// is lost.
	if math.Abs(r.Cost-11.0/60*0.6) > 1e-9 || math.Abs(r.LostCost-0.6/60) > 1e-9 {
		t.Errorf("cost %g lost %g, want %g and %g", r.Cost, r.LostCost, 11.0/60*0.6, 0.6/60)
	}
	if r.Pools[0].Preemptions != 1 || r.Pools[0].Attempts != 2 || r.Pools[1].Attempts != 0 {
		t.Errorf("pools %+v", r.Pools)
	}
	// A trainer that saves when told to stop loses nothing, and ends a
	// minute sooner.
	r = run(true)
	if r.Preemptions != 1 || r.Lost != 0 || r.LostCost != 0 || r.Makespan != 12*time.Minute {
		t.Errorf("save on stop: preemptions %d lost %s (%g) makespan %s, want 1, 0s, 12m0s", r.Preemptions, r.Lost, r.LostCost, r.Makespan)
	}
}

// Without a deadline no policy is asked, on the server as in the
// simulator: the trial starts on the first pool with room (spot), and once
// reclaimed resumes at once on the next (on-demand), and stays there.
func TestNoDeadlineFirstFit(t *testing.T) {
	pattern := "1111001111111111111111111111111111111111"
	e, data := parse(t, oneTrial)
	c, err := NewCurves(smallTable(t), e, "exp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.ScaleTo(2 * time.Minute)
	r, err := RunExperiment(ExperimentConfig{Spec: e, Data: data, Curves: c, Policy: schedule.ExpGreedy{},
		Pools: []*capacity.Pool{spotPool(t, 1, 0.6, time.Minute, pattern), onDemandPool(1, 3, time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	// Spot 0-4m (a step kept), on-demand 4m-11m: a restart, three steps.
	if r.Policy != "first-fit" || r.Pools[0].Attempts != 1 || r.Pools[1].Attempts != 1 || r.Makespan != 11*time.Minute {
		t.Errorf("policy %s, attempts on spot %d, on on-demand %d, makespan %s; want first-fit, 1, 1, 11m0s",
			r.Policy, r.Pools[0].Attempts, r.Pools[1].Attempts, r.Makespan)
	}
}

func TestBudgetEndsTheExperiment(t *testing.T) {
	// The run costs $1.40; with $0.50 it stops before that is spent, with
	// at most a billing increment over. The control loop stops trials early
	// enough that a stop taking its whole stop grace (2m) would still end
	// within the budget: it keeps what a trial costs in the grace and two
	// ticks (4m, $0.20) in hand, and starts no trial the check would stop
	// before it made progress.
	r := smallRun(t, smallExperiment, ExperimentConfig{Budget: 0.5, Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}})
	if r.End != "budget" || r.Finished || r.Met {
		t.Fatalf("end %s finished %v met %v, want budget, false, false", r.End, r.Finished, r.Met)
	}
	if r.Cost > 0.5+3.0/3600*2 || r.Cost < 0.3-1e-9 || r.Steps == 0 {
		t.Errorf("cost %g, %d steps; want at most the budget 0.5, at least 0.3 (what a stop could cost kept in hand), and some steps", r.Cost, r.Steps)
	}
	// A budget below a start's least cost starts nothing.
	r = smallRun(t, smallExperiment, ExperimentConfig{Budget: 0.01, Pools: []*capacity.Pool{onDemandPool(4, 3, 3*time.Minute)}})
	if r.End != "budget" || r.Cost != 0 || r.Steps != 0 {
		t.Errorf("tiny budget: end %s cost %g steps %d", r.End, r.Cost, r.Steps)
	}
}

func TestSpotThatNeverGoes(t *testing.T) {
	// A spot pool that is never reclaimed: the baselines run the same
	// search there, at the spot price. Virga starts on on-demand capacity
	// while nothing of the search is measured, moves to spot capacity at
	// the first checkpoints, and meets the deadline for less than
	// on-demand only.
	pools := []*capacity.Pool{spotPool(t, 4, 0.9, 3*time.Minute, ""), onDemandPool(4, 3, 3*time.Minute)}
	base := smallRun(t, smallExperiment, ExperimentConfig{Pools: pools, Deadline: time.Hour})
	for _, p := range schedule.ExperimentPolicies()[1:] {
		r := smallRun(t, smallExperiment, ExperimentConfig{Pools: pools, Deadline: time.Hour, Policy: p})
		if p.Name() == "virga" {
			if !r.Met || r.Cost >= base.Cost || r.Pools[0].Attempts == 0 || r.Pools[1].Attempts == 0 {
				t.Errorf("virga: met %v cost %g (on-demand only %g), attempts on spot %d, on on-demand %d",
					r.Met, r.Cost, base.Cost, r.Pools[0].Attempts, r.Pools[1].Attempts)
			}
			continue
		}
		if !r.Met || r.Makespan != base.Makespan || math.Abs(r.Cost-base.Cost*0.3) > 1e-9 || r.Pools[1].Attempts != 0 {
			t.Errorf("%s: met %v makespan %s cost %g, want %s and %g on spot", p.Name(), r.Met, r.Makespan, r.Cost, base.Makespan, base.Cost*0.3)
		}
	}
}

// An adaptive search on the digits-mlp table: the searcher pauses and
// resumes trials as the control loop would, paused trials never promoted
// end the search, every policy meets a loose deadline, and runs repeat
// exactly.
func TestAdaptiveSearchOnTheTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the digits-mlp search")
	}
	e, data, err := spec.Load("../../bench/search/tables/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tb, err := replay.Load("../../bench/search/tables/digits-mlp.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCurves(tb, e, "digits-mlp.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	c.ScaleTo(2 * time.Minute)
	set, err := capacity.LoadFile("../../examples/capacity/aws-p3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// On-demand only: the on-demand pool alone (without a deadline the
	// first pool with room takes the trials).
	cfg := ExperimentConfig{Spec: e, Data: data, Curves: c, Pools: onDemandOf(set.Pools), Policy: schedule.ExpOnDemandOnly{}, Deadline: -1}
	base, err := RunExperiment(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pools = set.Pools
	if !base.Finished || base.Trials != 200 || base.Completed == 0 || base.Best == nil || base.Best.Value > 0.1 {
		t.Fatalf("on-demand: %+v", base)
	}
	// Loose: three times the on-demand makespan. The policies plan with
	// ASHA's expected work (schedule.ShapeOf), which a search that avoids
	// near-copies of trained configurations undercuts (here 4h24m on
	// demand, 13 of its 200 trials completed, against 7h15m and 33 without
	// the rule), and under twice the makespan their safety nets then keep
	// every trial on demand.
	cfg.Deadline = 3 * base.Makespan
	cfg.TraceOffset = 100 * time.Hour // both zones have capacity at times
	for _, p := range schedule.ExperimentPolicies() {
		cfg.Policy = p
		r, err := RunExperiment(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Met {
			t.Errorf("%s: missed the deadline %s: %s", p.Name(), r.Deadline, r.Makespan)
		}
		if p.Name() != "on-demand" && r.Cost >= base.Cost {
			t.Errorf("%s: cost %g, not below on-demand's %g", p.Name(), r.Cost, base.Cost)
		}
		cfg.Policy = schedule.ExperimentPolicyNamed(p.Name())
		again, err := RunExperiment(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Errorf("%s: a second run differs (-first +second):\n%s", p.Name(), diff)
		}
	}
}

// onDemandOf returns the on-demand pools of pools.
func onDemandOf(pools []*capacity.Pool) []*capacity.Pool {
	var od []*capacity.Pool
	for _, p := range pools {
		if !p.Spot() {
			od = append(od, p)
		}
	}
	return od
}
