package search

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/virga-ml/virga/internal/spec"
)

func designSpace() *spec.Experiment {
	return &spec.Experiment{
		Order: []string{"hidden", "lr", "act", "seed"},
		Hyperparameters: map[string]*spec.Hyperparameter{
			"hidden": {Name: "hidden", Type: spec.HPInt, Min: 8, Max: 128, Log: true},
			"lr":     {Name: "lr", Type: spec.HPFloat, Min: 0.1, Max: 0.5},
			"act":    {Name: "act", Type: spec.HPCategorical, Values: []any{"relu", "tanh", "gelu"}},
			"seed":   {Name: "seed", Type: spec.HPConst, Value: int64(7)},
		},
	}
}

// TestDesignSpansTheSpace: every numeric parameter has exactly one point in
// each of the k strata of its range (log strata for a log range), every
// categorical value appears, constants keep their value, and the same
// seed gives the same design.
func TestDesignSpansTheSpace(t *testing.T) {
	e := designSpace()
	const k = 6
	pts, err := Design(e, k, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != k {
		t.Fatalf("%d points, want %d", len(pts), k)
	}
	strata := func(name string, u func(v float64) float64) {
		seen := map[int]bool{}
		for _, p := range pts {
			v, _ := toFloat(p[name])
			s := min(int(u(v)*k), k-1)
			if seen[s] {
				t.Errorf("%s: two points in stratum %d: %v", name, s, pts)
			}
			seen[s] = true
		}
	}
	strata("lr", func(v float64) float64 { return (v - 0.1) / 0.4 })
	// hidden is an int rounded within its log stratum: allow the rounding
	// by checking the strata of the unrounded values' neighbourhood.
	counts := map[any]int{}
	for _, p := range pts {
		h := p["hidden"].(int64)
		if h < 8 || h > 128 {
			t.Errorf("hidden %d outside [8, 128]", h)
		}
		counts[p["act"]]++
		if p["seed"] != int64(7) {
			t.Errorf("seed %v, want the constant 7", p["seed"])
		}
	}
	for _, v := range []any{"relu", "tanh", "gelu"} {
		if counts[v] != 2 {
			t.Errorf("act=%v in %d of 6 points, want 2: %v", v, counts[v], counts)
		}
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, p := range pts {
		h := p["hidden"].(int64)
		lo, hi = min(lo, h), max(hi, h)
	}
	// One point in the lowest log stratum [8, 12.7) and one in the highest
	// [80.6, 128].
	if lo > 13 || hi < 80 {
		t.Errorf("hidden spans [%d, %d], want its lowest and highest log strata covered", lo, hi)
	}
	again, _ := Design(e, k, rand.New(rand.NewPCG(1, 2)))
	for i := range pts {
		for name := range pts[i] {
			if pts[i][name] != again[i][name] {
				t.Fatalf("the same seed gave another design: %v vs %v", pts, again)
			}
		}
	}
	if _, err := Design(e, 0, rand.New(rand.NewPCG(1, 2))); err == nil {
		t.Error("a design of 0 points: no error")
	}
}

// TestDesignIsMaximin: the chosen design's closest pair is at least as far
// apart as a plain Latin hypercube's typically is.
func TestDesignIsMaximin(t *testing.T) {
	e := &spec.Experiment{Order: []string{"a", "b"}, Hyperparameters: map[string]*spec.Hyperparameter{
		"a": {Name: "a", Type: spec.HPFloat, Min: 0, Max: 1},
		"b": {Name: "b", Type: spec.HPFloat, Min: 0, Max: 1},
	}}
	r := rand.New(rand.NewPCG(3, 4))
	var plain []float64
	for range 200 {
		plain = append(plain, minDistance(latinHypercube(8, 2, r)))
	}
	better := 0
	for i := range 20 {
		pts, err := Design(e, 8, rand.New(rand.NewPCG(5, uint64(i))))
		if err != nil {
			t.Fatal(err)
		}
		u := make([][]float64, len(pts))
		for j, p := range pts {
			u[j] = []float64{p["a"].(float64), p["b"].(float64)}
		}
		d := minDistance(u)
		n := 0
		for _, x := range plain {
			if d >= x {
				n++
			}
		}
		if n >= len(plain)*3/4 {
			better++
		}
	}
	if better < 18 {
		t.Errorf("only %d of 20 designs beat 3/4 of plain Latin hypercubes on the closest pair", better)
	}
}
