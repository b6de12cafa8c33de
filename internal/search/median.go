package search

import (
	"encoding/json"
	"fmt"
	"slices"
)

// median is the median stopping rule (Golovin et al., Google Vizier, KDD
// 2017), as Optuna's MedianPruner applies it: at each step past the warm-up,
// a trial is stopped when its best value so far is worse than the median of
// the values that completed trials reported at the same step, once at least
// min_trials completed trials reported that step.
//
// Without warmup_steps, the warm-up is the first quarter of a trial:
// steps up to a quarter of the furthest step a completed trial reported
// (rounded up), and at least the first step. Nothing is judged before
// min_trials trials completed, so their length is known by then. A
// trainer's first reports (an untrained network, a first epoch) rank
// trials little better than chance, and the rule judges a trial at every
// step, so that a step of noise stops half the trials it sees; Optuna's
// default (n_warmup_steps 0) judges from the first.
type median struct {
	minTrials int
	warmup    int64
	st        medianState
	// last is the furthest step in st.Done, for autoWarmup; not saved.
	last int64
}

type medianState struct {
	// Done holds, per step, the sorted values completed trials reported.
	Done map[int64][]float64 `json:"done"`
	// Live holds each running trial's curve and best value so far.
	Live map[int64]*liveCurve `json:"live"`
}

type liveCurve struct {
	Steps  []int64   `json:"s"`
	Values []float64 `json:"v"`
	Best   float64   `json:"b"`
}

// autoWarmup as warmup_steps asks for the default warm-up.
const autoWarmup = -1

// medianWarmupFraction is the share of a trial's length never judged
// without warmup_steps.
const medianWarmupFraction = 4

func newMedian(minTrials, warmup int64) *median {
	return &median{minTrials: int(max(minTrials, 1)), warmup: warmup, st: medianState{Done: map[int64][]float64{}, Live: map[int64]*liveCurve{}}}
}

// add appends a point to a trial's curve. A step at or before the last one
// (a trial restarted from an earlier checkpoint reports its steps again)
// first drops the points from that step on, so the curve stays increasing
// and holds each step once.
func (c *liveCurve) add(step int64, v float64) {
	i, _ := slices.BinarySearch(c.Steps, step)
	c.Steps, c.Values = append(c.Steps[:i], step), append(c.Values[:i], v)
	c.Best = slices.Min(c.Values)
}

func (m *median) report(r *record, step int64, v float64) Decision {
	c := m.st.Live[r.Trial]
	if c == nil {
		c = &liveCurve{}
		m.st.Live[r.Trial] = c
	}
	c.add(step, v)
	if step < m.warmup || (m.warmup == autoWarmup && step <= m.autoWarmup()) {
		return Continue
	}
	done := m.st.Done[step]
	if len(done) < m.minTrials {
		return Continue
	}
	n := len(done)
	med := done[n/2]
	if n%2 == 0 {
		med = (done[n/2-1] + done[n/2]) / 2
	}
	if c.Best > med {
		return Stop
	}
	return Continue
}

// autoWarmup returns the default warm-up: a quarter of the furthest step a
// completed trial reported, rounded up, and at least 1.
func (m *median) autoWarmup() int64 {
	return max(1, (m.last+medianWarmupFraction-1)/medianWarmupFraction)
}

func (m *median) ended(r *record) {
	c := m.st.Live[r.Trial]
	delete(m.st.Live, r.Trial)
	if c == nil || !r.Complete {
		return
	}
	for i, s := range c.Steps {
		vs := m.st.Done[s]
		at, _ := slices.BinarySearch(vs, c.Values[i])
		m.st.Done[s] = slices.Insert(vs, at, c.Values[i])
		m.last = max(m.last, s)
	}
}

func (m *median) promote() *record { return nil }

func (m *median) save() (json.RawMessage, error) { return json.Marshal(m.st) }

func (m *median) load(b json.RawMessage, _ map[int64]*record) error {
	var st medianState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("median: %w", err)
	}
	if st.Done == nil {
		st.Done = map[int64][]float64{}
	}
	if st.Live == nil {
		st.Live = map[int64]*liveCurve{}
	}
	for s, vs := range st.Done {
		if !slices.IsSorted(vs) {
			return fmt.Errorf("median: values of step %d are not sorted", s)
		}
	}
	for id, c := range st.Live {
		if c == nil || len(c.Steps) != len(c.Values) {
			return fmt.Errorf("median: curve of trial %d is malformed", id)
		}
	}
	m.st, m.last = st, 0
	for s := range st.Done {
		m.last = max(m.last, s)
	}
	return nil
}
