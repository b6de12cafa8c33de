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
// measured at load, scaled by how much slower the model's recent batches
// ran than that profile said (the machine is busier than when it was
// profiled: other models, other processes, a colder cache). The scale is
// the largest of the ratios of measured to profiled time of the last
// adaptiveWindow batches (the largest: a late answer breaks the objective's
// promise, an early one costs a little goodput), none once no batch has
// ended for adaptiveAge, never below 1, so a policy that fills batches up to a deadline
// leaves room for the spread it has seen. Owned by the dispatcher's
// goroutine.
type adaptive struct {
	base   *Profile
	ratios []float64 // ring of the last adaptiveWindow ratios
	next   int
	last   time.Time // when the last batch ended
	scale  float64
}

var _ batch.Profile = (*adaptive)(nil)

func newAdaptive(p *Profile) *adaptive {
	return &adaptive{base: p, scale: 1}
}

// MaxRows implements batch.Profile.
func (a *adaptive) MaxRows() int { return a.base.MaxRows() }

// Latency implements batch.Profile.
func (a *adaptive) Latency(rows int) time.Duration {
	return time.Duration(float64(a.base.Latency(rows)) * a.scale)
}

// observe records a batch of rows that took took and ended at now.
func (a *adaptive) observe(now time.Time, rows int, took time.Duration) {
	want := a.base.Latency(rows)
	if rows < 1 || want <= 0 || took <= 0 {
		return
	}
	r := float64(took) / float64(want)
	if len(a.ratios) < adaptiveWindow {
		a.ratios = append(a.ratios, r)
	} else {
		a.ratios[a.next] = r
		a.next = (a.next + 1) % adaptiveWindow
	}
	a.last = now
	a.scale = max(slices.Max(a.ratios), 1)
}

// expire drops the correction once no batch has ended for adaptiveAge.
func (a *adaptive) expire(now time.Time) {
	if len(a.ratios) > 0 && now.Sub(a.last) > adaptiveAge {
		a.ratios, a.next, a.scale = a.ratios[:0], 0, 1
	}
}
