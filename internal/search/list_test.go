package search_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/virga-ml/virga/internal/search"
	"github.com/virga-ml/virga/internal/spec"
)

// experiment builds a spec with the given searcher and hyperparameters in the
// given order.
func experiment(searcher string, maxTrials int, hps ...*spec.Hyperparameter) *spec.Experiment {
	e := &spec.Experiment{
		Name:            "test",
		Searcher:        spec.Searcher{Name: searcher},
		MaxTrials:       maxTrials,
		Hyperparameters: map[string]*spec.Hyperparameter{},
	}
	for _, hp := range hps {
		e.Hyperparameters[hp.Name] = hp
		e.Order = append(e.Order, hp.Name)
	}
	return e
}

func intHP(name string, lo, hi float64) *spec.Hyperparameter {
	return &spec.Hyperparameter{Name: name, Type: spec.HPInt, Min: lo, Max: hi}
}

func floatHP(name string, lo, hi float64) *spec.Hyperparameter {
	return &spec.Hyperparameter{Name: name, Type: spec.HPFloat, Min: lo, Max: hi}
}

func logHP(hp *spec.Hyperparameter) *spec.Hyperparameter { hp.Log = true; return hp }

func countHP(hp *spec.Hyperparameter, n int) *spec.Hyperparameter { hp.Count = n; return hp }

func catHP(name string, vals ...any) *spec.Hyperparameter {
	return &spec.Hyperparameter{Name: name, Type: spec.HPCategorical, Values: vals}
}

func constHP(name string, v any) *spec.Hyperparameter {
	return &spec.Hyperparameter{Name: name, Type: spec.HPConst, Value: v}
}

func mustNew(t testing.TB, e *spec.Experiment, seed uint64) search.Searcher {
	t.Helper()
	s, err := search.New(e, seed)
	if err != nil {
		t.Fatalf("New(%s): %v", e.Searcher.Name, err)
	}
	return s
}

// drain proposes until the searcher is exhausted (or max proposals), telling
// it of each trial, and returns the proposals.
func drain(t testing.TB, s search.Searcher, max int) []search.Proposal {
	t.Helper()
	var out []search.Proposal
	for len(out) < max {
		p, err := s.Propose()
		if errors.Is(err, search.ErrExhausted) {
			return out
		}
		if err != nil {
			t.Fatalf("Propose: %v", err)
		}
		out = append(out, p)
		s.Created(p.ID, int64(1000+len(out)))
	}
	return out
}

func TestNewUnknownSearcher(t *testing.T) {
	_, err := search.New(experiment("bayes", 1), 1)
	if err == nil {
		t.Fatal("New(bayes) succeeded, want an error")
	}
	for _, want := range []string{`"bayes"`, "grid", "random", "single"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	// Every searcher the file format knows is built in, and no other.
	if got, want := search.Builtin().Names(), spec.SearcherNames(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want the parser's %v", got, want)
	}
}

func TestSpaceErrors(t *testing.T) {
	tests := []struct {
		name string
		e    *spec.Experiment
		want string // substring of the error
	}{
		{"float min > max", experiment("random", 1, floatHP("lr", 2, 1)), "greater than max"},
		{"log float min 0", experiment("random", 1, logHP(floatHP("lr", 0, 1))), "log scale"},
		{"log int min 0", experiment("random", 1, logHP(intHP("n", 0, 10))), "log scale"},
		{"int no integer", experiment("random", 1, intHP("n", 1.2, 1.8)), "no integer"},
		{"empty categorical", experiment("random", 1, catHP("opt")), "at least one value"},
		{"unknown type", experiment("random", 1, &spec.Hyperparameter{Name: "x", Type: "str"}), "unknown type"},
		{"grid int too wide", experiment("grid", 0, intHP("n", 1, 101)), "too many"},
		{"order names undefined", func() *spec.Experiment {
			e := experiment("grid", 0, intHP("n", 1, 2))
			e.Order = []string{"m"}
			return e
		}(), "not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := search.New(tt.e, 1)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSingle(t *testing.T) {
	e := experiment("single", 7,
		intHP("layers", 1, 4),
		logHP(intHP("width", 16, 256)),
		floatHP("dropout", 0, 0.5),
		logHP(floatHP("lr", 1e-4, 1e-2)),
		catHP("opt", "adam", "sgd"),
		constHP("epochs", 3),
	)
	s := mustNew(t, e, 1)
	got := drain(t, s, 10)
	want := []search.Proposal{{ID: "r1", HParams: map[string]any{
		"layers":  int64(3), // round(2.5)
		"width":   int64(64),
		"dropout": 0.25,
		"lr":      1e-3,
		"opt":     "adam",
		"epochs":  3,
	}}}
	if diff := cmp.Diff(want, got, cmp.Comparer(approxEqual)); diff != "" {
		t.Errorf("proposals (-want,+got):\n%s", diff)
	}
}

func TestSingleDefaults(t *testing.T) {
	withDefault := func(hp *spec.Hyperparameter, d any) *spec.Hyperparameter { hp.Default = d; return hp }
	e := experiment("single", 1,
		withDefault(intHP("layers", 1, 4), int64(4)),
		withDefault(logHP(intHP("width", 16, 256)), 17), // an int from a hand-built spec
		withDefault(floatHP("dropout", 0, 0.5), 0.1),
		withDefault(logHP(floatHP("lr", 1e-4, 1e-2)), int64(0)),
		withDefault(catHP("opt", "adam", "sgd"), "sgd"),
		constHP("epochs", int64(3)),
	)
	got := drain(t, mustNew(t, e, 1), 10)
	want := []search.Proposal{{ID: "r1", HParams: map[string]any{
		"layers": int64(4), "width": int64(17), "dropout": 0.1, "lr": 0.0, "opt": "sgd", "epochs": int64(3),
	}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("proposals (-want,+got):\n%s", diff)
	}
}

func approxEqual(a, b float64) bool {
	return math.Abs(a-b) <= 1e-12*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

func TestGridOrder(t *testing.T) {
	e := experiment("grid", 0, catHP("opt", "adam", "sgd"), intHP("layers", 1, 3), constHP("epochs", 5))
	got := drain(t, mustNew(t, e, 1), 100)
	var want []search.Proposal
	for _, opt := range []string{"adam", "sgd"} {
		for layers := int64(1); layers <= 3; layers++ {
			want = append(want, search.Proposal{
				ID:      fmt.Sprintf("r%d", len(want)+1),
				HParams: map[string]any{"opt": opt, "layers": layers, "epochs": 5},
			})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("proposals (-want,+got):\n%s", diff)
	}
}

func TestGridValues(t *testing.T) {
	tests := []struct {
		name string
		hp   *spec.Hyperparameter
		want []any // the values of the one parameter, in proposal order
	}{
		{"int all", intHP("x", -1, 2), []any{int64(-1), int64(0), int64(1), int64(2)}},
		{"int fractional bounds", intHP("x", 0.5, 3.5), []any{int64(1), int64(2), int64(3)}},
		{"int hundred", intHP("x", 1, 100), nil}, // checked by length below
		{"int count", countHP(intHP("x", 0, 1000), 5), []any{int64(0), int64(250), int64(500), int64(750), int64(1000)}},
		{"int count dedup", countHP(intHP("x", 1, 3), 5), []any{int64(1), int64(2), int64(3)}},
		{"int log count", countHP(logHP(intHP("x", 1, 1000)), 4), []any{int64(1), int64(10), int64(100), int64(1000)}},
		{"int log count dedup", countHP(logHP(intHP("x", 1, 1000)), 20), []any{ // 1.44 rounds to 1 like 1
			int64(1), int64(2), int64(3), int64(4), int64(6), int64(9), int64(13), int64(18), int64(26), int64(38),
			int64(55), int64(78), int64(113), int64(162), int64(234), int64(336), int64(483), int64(695), int64(1000)}},
		{"int count covers range", countHP(logHP(intHP("x", 1, 10)), 10), []any{
			int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), int64(9), int64(10)}},
		{"float default", floatHP("x", 0, 1), []any{0.0, 0.25, 0.5, 0.75, 1.0}},
		{"float count", countHP(floatHP("x", -1, 1), 3), []any{-1.0, 0.0, 1.0}},
		{"float log", countHP(logHP(floatHP("x", 1e-4, 1)), 5), []any{1e-4, 1e-3, 1e-2, 1e-1, 1.0}},
		{"float min == max", floatHP("x", 2, 2), []any{2.0}},
		{"categorical", catHP("x", "a", 1, true), []any{"a", 1, true}},
		{"const", constHP("x", "v"), []any{"v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := drain(t, mustNew(t, experiment("grid", 0, tt.hp), 1), 1000)
			var got []any
			for _, p := range ps {
				got = append(got, p.HParams["x"])
			}
			if tt.want == nil {
				if len(got) != 100 || got[0] != int64(1) || got[99] != int64(100) {
					t.Fatalf("got %d values from %v to %v, want 1..100", len(got), got[0], got[len(got)-1])
				}
				return
			}
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(approxEqual)); diff != "" {
				t.Errorf("values (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestGridMaxTrials(t *testing.T) {
	e := experiment("grid", 4, intHP("a", 1, 3), intHP("b", 1, 3))
	s := mustNew(t, e, 1)
	got := drain(t, s, 100)
	if len(got) != 4 {
		t.Fatalf("got %d proposals, want 4", len(got))
	}
	if want := map[string]any{"a": int64(2), "b": int64(1)}; !cmp.Equal(got[3].HParams, want) {
		t.Errorf("4th proposal %v, want %v", got[3].HParams, want)
	}
	for range 3 {
		if _, err := s.Propose(); !errors.Is(err, search.ErrExhausted) {
			t.Fatalf("Propose after the last: %v, want ErrExhausted", err)
		}
	}
}

func randomSpace(maxTrials int) *spec.Experiment {
	return experiment("random", maxTrials,
		intHP("layers", 1, 8),
		logHP(intHP("width", 16, 1024)),
		floatHP("dropout", 0, 0.5),
		logHP(floatHP("lr", 1e-5, 1e-1)),
		catHP("opt", "adam", "sgd", "rmsprop"),
		constHP("epochs", 10),
	)
}

func TestRandomDeterminism(t *testing.T) {
	a := drain(t, mustNew(t, randomSpace(50), 42), 1000)
	b := drain(t, mustNew(t, randomSpace(50), 42), 1000)
	c := drain(t, mustNew(t, randomSpace(50), 43), 1000)
	if len(a) != 50 {
		t.Fatalf("got %d proposals, want max_trials = 50", len(a))
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different proposals (-a,+b):\n%s", diff)
	}
	if cmp.Equal(a, c) {
		t.Error("seeds 42 and 43 gave the same proposals")
	}
	for i, p := range a {
		if want := fmt.Sprintf("r%d", i+1); p.ID != want {
			t.Errorf("proposal %d has ID %q, want %q", i, p.ID, want)
		}
	}
}

func TestRandomDefaultTrials(t *testing.T) {
	if got := drain(t, mustNew(t, randomSpace(0), 1), 1000); len(got) != 10 {
		t.Errorf("max_trials 0: got %d proposals, want 10", len(got))
	}
}

func TestRandomDistribution(t *testing.T) {
	const n = 20000
	e := experiment("random", n,
		intHP("i", -3, 3),
		logHP(intHP("li", 100, 10000)),
		floatHP("f", 2, 4),
		logHP(floatHP("lf", 1e-4, 1)),
		catHP("c", "a", "b", "c", "d"),
		constHP("k", true),
	)
	ps := drain(t, mustNew(t, e, 7), n)
	var is, lis, fs, lfs []float64
	counts := map[any]int{}
	intSeen := map[int64]bool{}
	for _, p := range ps {
		i := p.HParams["i"].(int64)
		li := p.HParams["li"].(int64)
		f := p.HParams["f"].(float64)
		lf := p.HParams["lf"].(float64)
		if i < -3 || i > 3 || li < 100 || li > 10000 || f < 2 || f > 4 || lf < 1e-4 || lf > 1 {
			t.Fatalf("value out of bounds: %v", p.HParams)
		}
		if p.HParams["k"] != true {
			t.Fatalf("const k = %v, want true", p.HParams["k"])
		}
		intSeen[i] = true
		counts[p.HParams["c"]]++
		is, lis, fs, lfs = append(is, float64(i)), append(lis, float64(li)), append(fs, f), append(lfs, lf)
	}
	if len(intSeen) != 7 {
		t.Errorf("int in [-3,3] took %d distinct values, want 7", len(intSeen))
	}
	for _, c := range []string{"a", "b", "c", "d"} {
		if got := counts[c]; math.Abs(float64(got)-n/4) > 0.05*n {
			t.Errorf("categorical %q chosen %d times of %d, want about %d", c, got, n, n/4)
		}
	}
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*want {
			t.Errorf("median of %s = %g, want %g ± %g%%", name, got, want, tol*100)
		}
	}
	near("uniform int (shifted)", median(is)+4, 4, 0.1)
	near("uniform float", median(fs), 3, 0.02)
	near("log-uniform float", median(lfs), 1e-2, 0.1) // geometric mean of 1e-4 and 1
	near("log-uniform int", median(lis), 1000, 0.1)   // geometric mean of 100 and 10000
	if m := median(fs); math.Abs(m-math.Sqrt(2*4)) < 0.05 {
		t.Errorf("uniform float median %g looks geometric", m)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestSnapshotRestore checks, over many seeds and cut points, that a searcher
// restored from a snapshot into a fresh searcher (made with another seed)
// proposes exactly what the uninterrupted searcher proposes.
func TestSnapshotRestore(t *testing.T) {
	for _, kind := range []string{"random", "grid", "single"} {
		t.Run(kind, func(t *testing.T) {
			mk := func(seed uint64) search.Searcher {
				e := randomSpace(25)
				e.Searcher.Name = kind
				e.Hyperparameters["width"].Count = 3
				e.Hyperparameters["lr"].Count = 3
				return mustNew(t, e, seed)
			}
			for seed := uint64(1); seed <= 200; seed++ {
				want := drain(t, mk(seed), 1000)
				cut := int(seed*7919) % (len(want) + 1)

				s := mk(seed)
				got := drain(t, s, cut)
				for i := range got {
					s.Observe(int64(1001+i), 5, float64(i))
					if i%2 == 0 {
						s.Ended(int64(1001+i), search.Completed)
					}
				}
				snap, err := s.Snapshot()
				if err != nil {
					t.Fatalf("seed %d: Snapshot: %v", seed, err)
				}
				r := mk(seed + 1000)
				if err := r.Restore(snap); err != nil {
					t.Fatalf("seed %d: Restore: %v", seed, err)
				}
				again, err := r.Snapshot()
				if err != nil {
					t.Fatalf("seed %d: Snapshot after Restore: %v", seed, err)
				}
				if string(again) != string(snap) {
					t.Fatalf("seed %d: snapshot changed by a restore:\n%s\n%s", seed, snap, again)
				}
				rest := drain(t, r, 1000)
				got = append(got, rest...)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("seed %d, cut %d: restored search differs (-want,+got):\n%s", seed, cut, diff)
				}
			}
		})
	}
}

func TestRestoreRejects(t *testing.T) {
	s := mustNew(t, randomSpace(5), 1)
	drain(t, s, 2)
	before, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	grid := mustNew(t, experiment("grid", 0, intHP("a", 1, 5)), 1)
	gridSnap, err := grid.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	other := mustNew(t, randomSpace(6), 1)
	otherSnap, err := other.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		snap string
		want string
	}{
		{"not JSON", "{", "restoring random searcher"},
		{"other searcher", string(gridSnap), `"grid"`},
		{"other limit", string(otherSnap), "did the experiment change"},
		{"no rng", `{"searcher":"random","limit":5,"proposed":1,"trials":[]}`, "no random state"},
		{"bad rng", `{"searcher":"random","limit":5,"proposed":1,"trials":[],"rng":"AAAA"}`, "random state"},
		{"too many proposed", strings.Replace(string(before), `"proposed":2`, `"proposed":9`, 1), "9 of 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Restore([]byte(tt.snap))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Restore: %v, want an error containing %q", err, tt.want)
			}
			after, err := s.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if string(after) != string(before) {
				t.Errorf("a failed Restore changed the state:\n%s\n%s", before, after)
			}
		})
	}
}

func TestTracksTrials(t *testing.T) {
	s := mustNew(t, experiment("grid", 0, intHP("a", 1, 3)), 1)
	p1, _ := s.Propose()
	p2, _ := s.Propose()
	s.Created(p1.ID, 11)
	s.Created(p2.ID, 12)
	if d := s.Observe(11, 3, math.NaN()); d != search.Continue {
		t.Errorf("Observe = %v, want continue", d)
	}
	if d := s.Observe(12, 4, 0.5); d != search.Continue {
		t.Errorf("Observe = %v, want continue", d)
	}
	if d := s.Observe(99, 1, 1); d != search.Continue { // unknown trial
		t.Errorf("Observe(unknown) = %v, want continue", d)
	}
	s.Ended(12, search.Failed)
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot with a NaN value: %v", err)
	}
	var st struct {
		Proposed int `json:"proposed"`
		Trials   []struct {
			Proposal string `json:"proposal"`
			Trial    int64  `json:"trial"`
			Step     int64  `json:"step"`
			Value    any    `json:"value"`
			Ended    bool   `json:"ended"`
			Outcome  int    `json:"outcome"`
		} `json:"trials"`
	}
	if err := json.Unmarshal(snap, &st); err != nil {
		t.Fatal(err)
	}
	// The ended trial is forgotten: snapshots hold only live trials.
	if st.Proposed != 2 || len(st.Trials) != 1 {
		t.Fatalf("snapshot %s: want 2 proposed, 1 live trial", snap)
	}
	if tr := st.Trials[0]; tr.Proposal != "r1" || tr.Trial != 11 {
		t.Errorf("trial 11 recorded as %+v", tr)
	}
	r := mustNew(t, experiment("grid", 0, intHP("a", 1, 3)), 1)
	if err := r.Restore(snap); err != nil {
		t.Fatalf("Restore of a NaN snapshot: %v", err)
	}
}
