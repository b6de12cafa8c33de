package control

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestQuantile checks quantile against sorting the union of the two lists.
func TestQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a := make([]time.Duration, rng.IntN(6))
		b := make([]time.Duration, rng.IntN(6))
		for i := range a {
			a[i] = time.Duration(rng.IntN(5))
		}
		for i := range b {
			b[i] = time.Duration(rng.IntN(5))
		}
		if len(a)+len(b) == 0 {
			continue
		}
		slices.Sort(a)
		slices.Sort(b)
		all := slices.Sorted(slices.Values(append(slices.Clone(a), b...)))
		for k := range all {
			if got := quantile(a, b, k); got != all[k] {
				t.Fatalf("quantile(%v, %v, %d) = %v, want %v", a, b, k, got, all[k])
			}
		}
	}
}
