package engine

import (
	"time"

	"github.com/virga-ml/virga/internal/serve/batch"
)

// adaptiveWindow is how many recent batches the latency correction is
// taken over, and adaptiveAge how recent they must be: a batch slowed by a
// stall (the process descheduled on a busy machine) is forgotten after it.
// Without the age, a ratio large enough to make every request look unable
// to meet its deadline refused them all, so no batch ran to replace it and
// the model refused every request for good.
const (
	adaptiveWindow = 64
	adaptiveAge    = time.Second
)

// adaptive is the profile a model's policy decides with: the latency
// measured at load, scaled by how much slower the model's recent batches
// ran than that profile said (the machine is busier than when it was
// profiled: other models, other processes, a colder cache). The scale is a
// the largest of the recent ratios of measured to profiled
// time (the largest of the window: a late answer breaks the objective's
// promise, an early one costs a little goodput), never below 1, so a policy
// that fills batches up to a deadline leaves room for the spread it has
// seen. Owned by
// the dispatcher's goroutine.
type adaptive struct {
	base   *Profile
	ratios []ratio // ring of the last adaptiveWindow ratios
	next   int
	scale  float64
}

type ratio struct {
	r  float64
	at time.Time
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

// observe records a batch of rows that took took, ending at now.
func (a *adaptive) observe(now time.Time, rows int, took time.Duration) {
	want := a.base.Latency(rows)
	if rows < 1 || want <= 0 || took <= 0 {
		return
	}
	r := ratio{r: float64(took) / float64(want), at: now}
	if len(a.ratios) < adaptiveWindow {
		a.ratios = append(a.ratios, r)
	} else {
		a.ratios[a.next] = r
		a.next = (a.next + 1) % adaptiveWindow
	}
	a.refresh(now)
}

// refresh sets the scale from the ratios of the batches that ended within
// adaptiveAge of now (1 if none did).
func (a *adaptive) refresh(now time.Time) {
	a.scale = 1
	for _, r := range a.ratios {
		if now.Sub(r.at) <= adaptiveAge {
			a.scale = max(a.scale, r.r)
		}
	}
}
