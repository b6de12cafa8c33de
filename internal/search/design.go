package search

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/virga-ml/virga/internal/spec"
)

// Design returns k points of the experiment's space chosen to span it, for
// measuring something over the space from few runs (the step time of a
// profile): a Latin hypercube over the int and float parameters, each range
// cut into k equal strata (on the log scale when log) with one point in
// each, the best of many random ones by the maximin rule (the design whose
// closest two points are farthest apart); categorical values are dealt out
// in turn, so each appears k/len(values) times, give or take one; constants
// keep their value. Drawn from r: the same r gives the same design.
func Design(e *spec.Experiment, k int, r *rand.Rand) ([]map[string]any, error) {
	if k < 1 {
		return nil, fmt.Errorf("a design needs at least one point, got %d", k)
	}
	sp, err := newSpace(e)
	if err != nil {
		return nil, err
	}
	d := sp.numeric()
	best, bestScore := [][]float64(nil), -1.0
	for range 64 {
		u := latinHypercube(k, d, r)
		if s := minDistance(u); s > bestScore {
			best, bestScore = u, s
		}
	}
	points := make([]map[string]any, k)
	for i := range points {
		points[i] = make(map[string]any, len(sp))
	}
	j := 0
	for _, p := range sp {
		hp := p.hp
		switch hp.Type {
		case spec.HPInt, spec.HPFloat:
			for i := range points {
				points[i][p.name] = p.fromUnit(best[i][j])
			}
			j++
		case spec.HPCategorical:
			order := r.Perm(len(hp.Values))
			start := r.IntN(len(hp.Values))
			for i := range points {
				points[i][p.name] = hp.Values[order[(start+i)%len(order)]]
			}
		default:
			for i := range points {
				points[i][p.name] = hp.Value
			}
		}
	}
	return points, nil
}

// latinHypercube returns k points of [0, 1]^d with exactly one point in
// each of the k strata of every dimension, at a random place within it.
func latinHypercube(k, d int, r *rand.Rand) [][]float64 {
	u := make([][]float64, k)
	for i := range u {
		u[i] = make([]float64, d)
	}
	for j := range d {
		for i, s := range r.Perm(k) {
			u[i][j] = (float64(s) + r.Float64()) / float64(k)
		}
	}
	return u
}

// minDistance is the smallest distance between two of the points
// (+Inf for fewer than two).
func minDistance(u [][]float64) float64 {
	m := math.Inf(1)
	for a := range u {
		for b := a + 1; b < len(u); b++ {
			s := 0.0
			for j := range u[a] {
				x := u[a][j] - u[b][j]
				s += x * x
			}
			m = min(m, math.Sqrt(s))
		}
	}
	return m
}

// fromUnit is the value of an int or float parameter at x in [0, 1] of its
// range (the inverse of space.unit): on the log scale when log, ints rounded
// to the nearest integer of the range.
func (p param) fromUnit(x float64) any {
	hp := p.hp
	lo, hi := hp.Min, hp.Max
	if hp.Type == spec.HPInt {
		ilo, ihi, _ := p.intBounds()
		lo, hi = float64(ilo), float64(ihi)
	}
	var v float64
	if hp.Log && lo > 0 {
		v = math.Exp(math.Log(lo) + x*(math.Log(hi)-math.Log(lo)))
	} else {
		v = lo + x*(hi-lo)
	}
	if hp.Type == spec.HPInt {
		return clampInt(int64(math.Round(v)), int64(lo), int64(hi))
	}
	return clampFloat(v, lo, hi)
}
