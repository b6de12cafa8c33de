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

// tabledLinear is a Linear profile that keeps its latencies in a table, as
// the engine's profile does.
type tabledLinear struct {
	Linear
	table []time.Duration
	eff   int
}

func newTabledLinear(p Linear) *tabledLinear {
	t := &tabledLinear{Linear: p, table: make([]time.Duration, p.MaxRows()+1)}
	for r := 1; r <= p.MaxRows(); r++ {
		t.table[r] = p.Latency(r)
	}
	t.eff = EfficientRows(t.table)
	return t
}

func (t *tabledLinear) LatencyTable() ([]time.Duration, int) { return t.table, t.eff }

// BenchmarkDeadlineDecideFullRequests is the decision at saturation in
// bench/serve overhead's best configuration: 8 clients sending requests of
// 1,024 rows, the model's largest batch, on a profile that tables its
// latencies (the engine's).
func BenchmarkDeadlineDecideFullRequests(b *testing.B) {
	p := newTabledLinear(Linear{Base: 7 * time.Microsecond, PerRow: 220 * time.Nanosecond, Max: 1024})
	dl := &Deadline{}
	queue := make([]Item, 8)
	for i := range queue {
		at := t0.Add(time.Duration(i) * 30 * time.Microsecond)
		queue[i] = Item{Arrived: at, Deadline: at.Add(10 * time.Second), Rows: 1024}
		dl.Decide(at, queue[:i+1], 0, p)
	}
	now := queue[7].Arrived
	for b.Loop() {
		dl.Decide(now, queue, 1, p)
	}
}

// The deadline policy decides the same with a profile that tables its
// latencies as with one that does not, and allocates nothing for the
// table at a decision.
func TestDeadlineDecidesTheSameOnATabledProfile(t *testing.T) {
	lin := Linear{Base: 7 * time.Microsecond, PerRow: 220 * time.Nanosecond, Max: 1024}
	tab := newTabledLinear(lin)
	a, b := &Deadline{}, &Deadline{}
	queue := make([]Item, 40)
	for i := range queue {
		at := t0.Add(time.Duration(i) * 3 * time.Microsecond)
		queue[i] = Item{Arrived: at, Deadline: at.Add(600 * time.Microsecond), Rows: 1 + i%100}
		da, db := a.Decide(at, queue[:i+1], 1, lin), b.Decide(at, queue[:i+1], 1, tab)
		if !slices.Equal(da.Run, db.Run) || !slices.Equal(da.Refuse, db.Refuse) || !da.Wake.Equal(db.Wake) {
			t.Fatalf("queue of %d: %+v on the profile, %+v on its table", i+1, da, db)
		}
	}
	now := queue[len(queue)-1].Arrived
	tabled := testing.AllocsPerRun(100, func() { b.Decide(now, queue, 1, tab) })
	plain := testing.AllocsPerRun(100, func() { a.Decide(now, queue, 1, lin) })
	t.Logf("allocations a decision: %.0f tabled, %.0f not", tabled, plain)
	if tabled > plain {
		t.Errorf("%.0f allocations a decision on a tabled profile, %.0f on the same untabled", tabled, plain)
	}
}
