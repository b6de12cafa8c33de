package batch

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// paretoBySort is pareto as a stable sort and a filter: the definition the
// linear pareto must agree with.
func paretoBySort(cands []planEntry, next int64) []planEntry {
	cands = slices.Clone(cands)
	slices.SortStableFunc(cands, func(x, y planEntry) int {
		if x.drops != y.drops {
			return x.drops - y.drops
		}
		switch {
		case x.finish < y.finish:
			return -1
		case x.finish > y.finish:
			return 1
		}
		return (y.hi - y.lo) - (x.hi - x.lo)
	})
	var out []planEntry
	for _, c := range cands {
		if len(out) > 0 && c.finish >= out[len(out)-1].finish {
			continue
		}
		out = append(out, c)
		if c.finish <= next {
			break
		}
	}
	return out
}

// TestParetoAgreesWithSortingTheCandidates: ties in drops, finish and batch
// size included, the frontier is entry for entry the sorted one's.
func TestParetoAgreesWithSortingTheCandidates(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 20000 {
		n := rng.IntN(40)
		cands := make([]planEntry, n)
		for i := range cands {
			lo := rng.IntN(4) - 1
			cands[i] = planEntry{drops: rng.IntN(6), finish: int64(rng.IntN(12)), lo: lo, hi: lo + rng.IntN(3), firstFinish: int64(i)}
		}
		next := int64(rng.IntN(14)) - 1
		want := paretoBySort(cands, next)
		got := pareto(slices.Clone(cands), next)
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d: pareto(%v, %d) = %v, want %v", trial, cands, next, got, want)
		}
	}
}

// BenchmarkDeadlineDecideBacklog is the decision the engine's dispatcher
// makes at saturation in bench/serve overhead: 32 requests of 64 rows
// queued for the digits model (7 us + 0.22 us a row, up to 1,024 rows).
func BenchmarkDeadlineDecideBacklog(b *testing.B) {
	p := Linear{Base: 7 * time.Microsecond, PerRow: 220 * time.Nanosecond, Max: 1024}
	dl := &Deadline{}
	queue := make([]Item, 32)
	for i := range queue {
		at := t0.Add(time.Duration(i) * 10 * time.Microsecond)
		queue[i] = Item{Arrived: at, Deadline: at.Add(10 * time.Second), Rows: 64}
		dl.Decide(at, queue[:i+1], 0, p)
	}
	now := queue[31].Arrived
	for b.Loop() {
		dl.Decide(now, queue, 1, p)
	}
}
