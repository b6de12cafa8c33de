package search

import (
	"math"
	"math/rand/v2"
	"testing"
)

// nearScan is nearIndex.near as a visit of every place: the reference.
func nearScan(points []unitPoint, tol float64, x []float64, cat string) bool {
outer:
	for _, u := range points {
		if u.cat != cat {
			continue
		}
		for i, v := range u.x {
			if math.Abs(v-x[i]) > tol {
				continue outer
			}
		}
		return true
	}
	return false
}

// TestNearIndex adds random places to the grid and checks that it finds a
// near one exactly when a visit of every place does: in 1 to 6 numeric
// dimensions, with categories, points on cell borders and at tol exactly,
// and coordinates off the grid (NaN, infinite, far out of [0, 1]).
func TestNearIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	odd := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e12, -3}
	for _, tol := range []float64{0.5, 0.1, 0.05, 0.013, 1e-4} {
		for dims := 1; dims <= 6; dims++ {
			n := newNearIndex(tol)
			var points []unitPoint
			draw := func() ([]float64, string) {
				x := make([]float64, dims)
				var near []float64 // a place to draw close to
				if len(points) > 0 && rng.IntN(3) == 0 {
					near = points[rng.IntN(len(points))].x
				}
				for i := range x {
					switch r := rng.IntN(40); {
					case r == 0:
						x[i] = odd[rng.IntN(len(odd))]
					case near != nil && r < 20:
						// At tol exactly from the place, or about as far.
						x[i] = near[i] + tol*float64(rng.IntN(3)-1)
					case near != nil:
						x[i] = near[i] + tol*(2.4*rng.Float64()-1.2)
					case r < 4:
						x[i] = float64(rng.IntN(int(1/tol)+1)) * tol // on a cell border
					default:
						x[i] = rng.Float64()
					}
				}
				return x, []string{"", "a\x00", "b\x00"}[rng.IntN(3)]
			}
			found := 0
			for range 600 {
				x, cat := draw()
				got, want := n.near(x, cat), nearScan(points, tol, x, cat)
				if got != want {
					t.Fatalf("tol %g, %d dims, %d places: near(%v, %q) = %v, a visit of every place says %v", tol, dims, len(points), x, cat, got, want)
				}
				if want {
					found++
				}
				u := unitPoint{x: x, cat: cat}
				n.add(u)
				points = append(points, u)
			}
			if found == 0 {
				t.Errorf("tol %g, %d dims: no near place among 600: the test does not exercise the grid", tol, dims)
			}
		}
	}
}
