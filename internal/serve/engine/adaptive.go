package engine

import (
	"slices"
	"time"

	"github.com/virga-ml/virga/internal/serve/batch"
)

// adaptiveWindow is how many recent batches the latency correction is
// taken over.
const adaptiveWindow = 64

// adaptiveAge is how long the latency correction outlives the model's last
// batch. A stalled batch (the process descheduled, a garbage collection)
// that took longer than the objective makes the policy refuse every request
// while it counts; with every request refused no batch runs to push it out
// of the window, so after adaptiveAge without a batch the correction is
// dropped.
const adaptiveAge = time.Second

// adaptive is the profile a model's policy decides with: the latency
// measured at load, plus how much longer than that profile said the model's
// recent batches ran (the machine is busier than when it was profiled:
// other models loading, other processes, a collection). The addition is the
// largest excess of the last adaptiveWindow batches (the largest: a late
// answer breaks the objective's promise, an early one costs a little
// goodput), none once no batch has ended for adaptiveAge. It is added, not
// multiplied: a stall is time lost whatever the batch, so a 20 ms pause of a
// 20 us model must not make its every batch look 1,000 times longer, while a
// machine twice as slow for a model's largest batch makes every batch at
// most that much longer. Owned by the dispatcher's goroutine.
type adaptive struct {
	base   *Profile
	table  []time.Duration // base.Latency(r) at r, for r up to base.Max (when at most maxTable)
	extras []time.Duration // ring of the last adaptiveWindow excesses (>= 0)
	next   int
	last   time.Time // when the last batch ended
	extra  time.Duration

	// Latency at every batch size with the correction (LatencyTable),
	// filled again only when the correction changed since.
	corrected      []time.Duration
	correctedExtra time.Duration
	efficient      int
}

var _ batch.Tabled = (*adaptive)(nil)

// maxTable is the largest batch whose latencies are tabled: above it,
// Latency interpolates on every call.
const maxTable = 1 << 16

func newAdaptive(p *Profile) *adaptive {
	a := &adaptive{base: p}
	// A policy may ask the latency of every batch size at every decision
	// (deadline's planning does): a lookup instead of a binary search and
	// an interpolation.
	if p.Max <= maxTable {
		a.table = make([]time.Duration, p.Max+1)
		for r := range a.table {
			a.table[r] = p.Latency(r)
		}
	}
	return a
}

// MaxRows implements batch.Profile.
func (a *adaptive) MaxRows() int { return a.base.MaxRows() }

// Latency implements batch.Profile.
func (a *adaptive) Latency(rows int) time.Duration {
	return a.profiled(rows) + a.extra
}

// LatencyTable implements batch.Tabled. The deadline policy plans with
// every batch size's latency at every decision; it was 9% of the engine's
// CPU at saturation to ask them one by one (bench/serve's overhead).
func (a *adaptive) LatencyTable() ([]time.Duration, int) {
	n := a.base.MaxRows()
	if len(a.corrected) != n+1 || a.correctedExtra != a.extra {
		if len(a.corrected) != n+1 {
			a.corrected = make([]time.Duration, n+1)
		}
		for r := 1; r <= n; r++ {
			a.corrected[r] = a.profiled(r) + a.extra
		}
		a.correctedExtra = a.extra
		a.efficient = batch.EfficientRows(a.corrected)
	}
	return a.corrected, a.efficient
}

// profiled is the load-time profile's latency of rows.
func (a *adaptive) profiled(rows int) time.Duration {
	if rows >= 0 && rows < len(a.table) {
		return a.table[rows]
	}
	return a.base.Latency(rows)
}

// observe records a batch of rows that took took and ended at now.
func (a *adaptive) observe(now time.Time, rows int, took time.Duration) {
	if rows < 1 || took <= 0 {
		return
	}
	x := max(took-a.profiled(rows), 0)
	if len(a.extras) < adaptiveWindow {
		a.extras = append(a.extras, x)
	} else {
		a.extras[a.next] = x
		a.next = (a.next + 1) % adaptiveWindow
	}
	a.last = now
	a.extra = slices.Max(a.extras)
}

// expire drops the correction once no batch has ended for adaptiveAge.
func (a *adaptive) expire(now time.Time) {
	if len(a.extras) > 0 && now.Sub(a.last) > adaptiveAge {
		a.extras, a.next, a.extra = a.extras[:0], 0, 0
	}
}
