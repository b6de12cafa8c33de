package search

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The order a rung keeps as trials arrive is the one a stable sort of its
// values gives, and each arrival's place is its rank, with ties, repeated
// values, NaNs and an order rebuilt after a restore.
func TestRungOrderMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		s, err := newRungs("promote", 1, 27, 3, false)
		if err != nil {
			t.Fatal(err)
		}
		s.st = s.fresh()
		s.st.Rungs[0] = [][]rungEntry{nil}
		n := 1 + rng.IntN(300)
		for i := range n {
			v := float64(rng.IntN(20)) // many ties
			if round%7 == 0 && rng.IntN(50) == 0 {
				v = math.NaN()
			}
			s.st.Rungs[0][0] = append(s.st.Rungs[0][0], rungEntry{Trial: int64(i + 1), Value: v})
			if round%5 == 0 && rng.IntN(40) == 0 {
				s.st.order = nil // as after a restore
			}
			got := s.arrived(0, 0)
			rung := s.st.Rungs[0][0]
			if want := rank(rung, i); got != want {
				t.Fatalf("round %d: entry %d: place %d, rank %d", round, i, got, want)
			}
			want := make([]int, len(rung))
			for j := range want {
				want[j] = j
			}
			slices.SortStableFunc(want, func(x, y int) int { return cmpFloat(rung[x].Value, rung[y].Value) })
			if o := s.sorted(0, 0); !slices.Equal(o, want) {
				t.Fatalf("round %d: after %d entries: order %v, stable sort %v", round, i+1, o, want)
			}
		}
	}
}
