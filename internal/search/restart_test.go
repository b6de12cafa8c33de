package search_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/search/replay"
	"github.com/virga-ml/virga/internal/spec"
)

// synthTable is a small tabular benchmark with power-law learning curves:
// lr (log), width (int) and act (categorical), 8*5*3 = 120 configurations
// of 27 epochs, some that start fast and end badly.
func synthTable(seed uint64) *replay.Table {
	r := rand.New(rand.NewPCG(seed, 1))
	t := &replay.Table{Name: "synth", Metric: "loss", Direction: "minimize", Epochs: 27, Space: []replay.Dim{
		{Name: "lr", Type: "float", Log: true, Values: []any{0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0}},
		{Name: "width", Type: "int", Log: true, Values: []any{8.0, 16.0, 32.0, 64.0, 128.0}},
		{Name: "act", Type: "categorical", Values: []any{"relu", "tanh", "sigmoid"}},
	}}
	for _, lr := range t.Space[0].Values {
		for _, w := range t.Space[1].Values {
			for ai, act := range t.Space[2].Values {
				l := math.Log10(lr.(float64))
				final := 0.1 + 0.05*(l+1.5)*(l+1.5) + 0.3/math.Sqrt(w.(float64)) + 0.04*float64(ai) + 0.02*r.Float64()
				speed := 0.4 + 0.3*(l+3)
				c := replay.Config{HParams: map[string]any{"lr": lr, "width": w, "act": act}}
				for e := 1; e <= t.Epochs; e++ {
					v := final + 2*math.Pow(float64(e), -speed) + 0.01*r.NormFloat64()
					if lr.(float64) >= 1 {
						v += 0.01 * float64(e) // diverges slowly: good early, bad late
					}
					c.Curve = append(c.Curve, v)
					c.Seconds = append(c.Seconds, 0.5+w.(float64)/64)
				}
				t.Configs = append(t.Configs, c)
			}
		}
	}
	return t
}

var searchers = []struct {
	name string
	s    spec.Searcher
}{
	{"random", spec.Searcher{Name: "random", Sampler: "random"}},
	{"tpe", spec.Searcher{Name: "tpe", Sampler: "tpe", Settings: map[string]any{"startup_trials": int64(5)}}},
	{"tpe-multivariate", spec.Searcher{Name: "tpe", Sampler: "tpe", Settings: map[string]any{"multivariate": true}}},
	{"random+asha", spec.Searcher{Name: "random+asha", Sampler: "random", Stopper: "asha"}},
	{"tpe+asha-promote", spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha",
		Settings: map[string]any{"mode": "promote", "max_resource": int64(27), "reduction_factor": int64(3)}}},
	// grid+asha sets the first rung at step 1: the grid's first trials are
	// alike, and only more rungs than the default's stop enough of them.
	{"grid+asha", spec.Searcher{Name: "grid+asha", Sampler: "grid", Stopper: "asha", Settings: map[string]any{"min_resource": int64(1)}}},
	{"random+hyperband", spec.Searcher{Name: "random+hyperband", Sampler: "random", Stopper: "hyperband",
		Settings: map[string]any{"max_resource": int64(27)}}},
	{"tpe+asha", spec.Searcher{Name: "tpe+asha", Sampler: "tpe", Stopper: "asha", Settings: map[string]any{"min_resource": int64(3)}}},
	{"tpe+hyperband-promote", spec.Searcher{Name: "tpe+hyperband", Sampler: "tpe", Stopper: "hyperband",
		Settings: map[string]any{"max_resource": int64(27), "mode": "promote"}}},
	{"tpe+median", spec.Searcher{Name: "tpe+median", Sampler: "tpe", Stopper: "median"}},
	{"random+curve", spec.Searcher{Name: "random+curve", Sampler: "random", Stopper: "curve",
		Settings: map[string]any{"max_resource": int64(27)}}},
	{"pbt", spec.Searcher{Name: "pbt", Settings: map[string]any{"max_resource": int64(27), "population": int64(6), "interval": int64(3)}}},
}

func run(t *testing.T, tb *replay.Table, s spec.Searcher, seed uint64, restartEvery int) *replay.Result {
	t.Helper()
	e := tb.Experiment(s, 60)
	make := func() (search.Searcher, error) { return search.New(e, seed) }
	first, err := make()
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(tb, first, replay.Options{Workers: 4, BudgetEpochs: 60 * 27, RestartEvery: restartEvery, Remake: make})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRestartContinuesTheSameSearch checks the searchers' promise: a
// searcher replaced by a new one restored from its snapshot, as after a
// server restart, makes exactly the decisions and proposals it would have.
func TestRestartContinuesTheSameSearch(t *testing.T) {
	tb := synthTable(1)
	for _, sc := range searchers {
		t.Run(sc.name, func(t *testing.T) {
			for seed := range uint64(3) {
				plain := run(t, tb, sc.s, seed, 0)
				restarted := run(t, tb, sc.s, seed, 7)
				if restarted.Restarts == 0 {
					t.Fatal("no restart happened")
				}
				if !slices.Equal(plain.Trace, restarted.Trace) {
					t.Fatalf("seed %d: the trace differs after restarts (%d vs %d epochs, first difference at %d)",
						seed, len(plain.Trace), len(restarted.Trace), firstDiff(plain.Trace, restarted.Trace))
				}
				other := run(t, tb, sc.s, seed+100, 0)
				if sc.s.Sampler != "grid" && slices.Equal(plain.Trace, other.Trace) {
					t.Errorf("seeds %d and %d gave the same search", seed, seed+100)
				}
			}
		})
	}
}

func firstDiff(a, b []replay.Epoch) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestStoppersSaveEpochs checks that every stopper trains fewer epochs per
// trial than running every trial to the end, and that promote mode pauses
// and resumes trials.
func TestStoppersSaveEpochs(t *testing.T) {
	tb := synthTable(2)
	for _, sc := range searchers {
		if sc.s.Stopper == "" {
			continue
		}
		res := run(t, tb, sc.s, 1, 0)
		perTrial := float64(len(res.Trace)) / float64(res.Trials)
		t.Logf("%s: %d trials, %d stopped, %d pauses, %.1f epochs per trial", sc.name, res.Trials, res.Stopped, res.Paused, perTrial)
		if perTrial >= 0.8*float64(tb.Epochs) {
			t.Errorf("%s: %.1f epochs per trial of %d: it stops almost nothing", sc.name, perTrial, tb.Epochs)
		}
		if sc.s.Settings["mode"] == "promote" && res.Paused == 0 {
			t.Errorf("%s: promote mode paused no trial", sc.name)
		}
	}
}

// TestAdaptiveBeatsRandom checks, over 20 seeds on the synthetic table, that
// TPE and ASHA reach a lower mean regret than random search for the same
// number of epochs.
func TestAdaptiveBeatsRandom(t *testing.T) {
	tb := synthTable(3)
	mean := func(s spec.Searcher) float64 {
		sum := 0.0
		for seed := range uint64(20) {
			e := tb.Experiment(s, 400)
			sr, err := search.New(e, seed)
			if err != nil {
				t.Fatal(err)
			}
			res, err := replay.Run(tb, sr, replay.Options{Workers: 4, BudgetEpochs: 20 * 27})
			if err != nil {
				t.Fatal(err)
			}
			reg := tb.Regret(res.Trace)
			sum += reg[len(reg)-1]
		}
		return sum / 20
	}
	random := mean(searchers[0].s)
	for _, sc := range searchers[1:] {
		if sc.name == "pbt" || sc.s.Sampler == "grid" {
			continue
		}
		got := mean(sc.s)
		t.Logf("%-22s mean final regret %.4f (random %.4f)", sc.name, got, random)
		if got >= random {
			t.Errorf("%s: mean regret %.4f is not below random search's %.4f", sc.name, got, random)
		}
	}
}

func TestUnknownStopper(t *testing.T) {
	e := synthTable(1).Experiment(spec.Searcher{Name: "x", Sampler: "random", Stopper: "nope"}, 10)
	_, err := search.New(e, 1)
	if err == nil || !strings.Contains(err.Error(), `unknown searcher "nope"`) {
		t.Fatalf("error %v, want one naming the unknown stopper", err)
	}
}

// TestFiniteSpaceProposesNoRepeats checks that in a finite space TPE, and
// random sampling under a stopper, try every configuration once before any
// twice (the plain random searcher is the textbook baseline and may repeat).
func TestFiniteSpaceProposesNoRepeats(t *testing.T) {
	e := &spec.Experiment{
		Hyperparameters: map[string]*spec.Hyperparameter{
			"a": {Name: "a", Type: spec.HPInt, Min: 0, Max: 3},
			"b": {Name: "b", Type: spec.HPCategorical, Values: []any{"x", "y", "z"}},
		},
		Order:     []string{"a", "b"},
		Objective: spec.Objective{Metric: "loss", Direction: spec.Minimize},
		MaxTrials: 12,
	}
	for _, sampler := range []string{"random", "tpe"} {
		e.Searcher = spec.Searcher{Name: sampler + "+median", Sampler: sampler, Stopper: "median", Settings: map[string]any{"startup_trials": int64(3)}}
		s, err := search.New(e, 3)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i := range 12 {
			p, err := s.Propose()
			if err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprint(p.HParams["a"], p.HParams["b"])
			if seen[key] {
				t.Errorf("%s: proposal %d repeats %s before every configuration was tried", sampler, i+1, key)
			}
			seen[key] = true
			id := int64(i + 1)
			s.Created(p.ID, id)
			s.Observe(id, 1, float64(p.HParams["a"].(int64)))
			s.Ended(id, search.Completed)
		}
	}
}

// TestFinishRunsToTheEnd: when ASHA in promote mode can promote no one and no
// trial reached max_resource, the best paused trial is run to the end in one
// go, through every higher rung.
func TestFinishRunsToTheEnd(t *testing.T) {
	e := synthTable(1).Experiment(spec.Searcher{Name: "random+asha", Sampler: "random", Stopper: "asha",
		Settings: map[string]any{"mode": "promote", "max_resource": int64(27), "min_resource": int64(1)}}, 2)
	s, err := search.New(e, 1)
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range map[int64]float64{1: 0.2, 2: 0.5} {
		p, err := s.Propose()
		if err != nil {
			t.Fatal(err)
		}
		s.Created(p.ID, id)
		if d := s.Observe(id, 1, v); d != search.Pause {
			t.Fatalf("trial %d at the first rung: %s, want pause", id, d)
		}
		s.(search.PauseAware).Paused(id)
	}
	p, err := s.Propose()
	if err != nil || p.Resume != 1 {
		t.Fatalf("Propose = %+v, %v; want trial 1, the best, resumed to finish", p, err)
	}
	for _, step := range []int64{2, 3, 9, 26, 27} {
		if d := s.Observe(1, step, 0.1); d != search.Continue {
			t.Fatalf("finishing trial at step %d: %s, want continue", step, d)
		}
	}
	s.Ended(1, search.Completed)
	if _, err := s.Propose(); err != search.ErrExhausted {
		t.Fatalf("after the finish: %v, want exhausted", err)
	}
}

// TestContinuousSpaceProposesNoNearCopies checks that in a space with float
// parameters TPE, and random sampling under a stopper, do not propose a
// configuration within 1% of the range, in every parameter, of one already
// proposed (the rule's tolerance for 40 trials in 2 dimensions is 7.9%),
// even when one configuration is far better than the rest, where TPE's good
// model is narrow around it.
func TestContinuousSpaceProposesNoNearCopies(t *testing.T) {
	e := &spec.Experiment{
		Hyperparameters: map[string]*spec.Hyperparameter{
			"lr": {Name: "lr", Type: spec.HPFloat, Min: 1e-5, Max: 0.1, Log: true},
			"x":  {Name: "x", Type: spec.HPFloat, Min: 0, Max: 1},
			"b":  {Name: "b", Type: spec.HPCategorical, Values: []any{"p", "q"}},
		},
		Order:     []string{"lr", "x", "b"},
		Objective: spec.Objective{Metric: "loss", Direction: spec.Minimize},
		MaxTrials: 40,
	}
	loss := func(hp map[string]any) float64 {
		l := math.Log10(hp["lr"].(float64)) + 3
		return l*l + (hp["x"].(float64)-0.3)*(hp["x"].(float64)-0.3)
	}
	unit := func(hp map[string]any) [2]float64 {
		return [2]float64{(math.Log(hp["lr"].(float64)) - math.Log(1e-5)) / (math.Log(0.1) - math.Log(1e-5)), hp["x"].(float64)}
	}
	for _, sc := range []spec.Searcher{
		{Name: "tpe", Sampler: "tpe", Settings: map[string]any{"startup_trials": int64(5)}},
		{Name: "tpe+median", Sampler: "tpe", Stopper: "median", Settings: map[string]any{"startup_trials": int64(5)}},
		{Name: "random+asha", Sampler: "random", Stopper: "asha"},
	} {
		e.Searcher = sc
		for seed := range uint64(5) {
			s, err := search.New(e, seed)
			if err != nil {
				t.Fatal(err)
			}
			var tried []map[string]any
			for i := range 40 {
				p, err := s.Propose()
				if err != nil {
					t.Fatal(err)
				}
				u := unit(p.HParams)
				for j, q := range tried {
					v := unit(q)
					if q["b"] == p.HParams["b"] && math.Abs(u[0]-v[0]) < 0.01 && math.Abs(u[1]-v[1]) < 0.01 {
						t.Fatalf("%s, seed %d: proposal %d %v nearly repeats proposal %d %v", sc.Name, seed, i+1, p.HParams, j+1, q)
					}
				}
				tried = append(tried, p.HParams)
				id := int64(i + 1)
				s.Created(p.ID, id)
				s.Observe(id, 1, loss(p.HParams))
				s.Ended(id, search.Completed)
			}
		}
	}
}
