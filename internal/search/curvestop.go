package search

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/virga-ml/virga"
	"github.com/virga-ml/virga/internal/search/curve"
)

// curveStopper stops a trial when its learning curve, extrapolated to
// max_resource by an ensemble of parametric curve families (package curve;
// the idea of Domhan et al., IJCAI 2015, and SpotTune), gives it a
// probability under threshold of ending better than the best completed
// trial. Trials are judged once they have min_steps points and min_trials
// trials have completed; every forecast is kept for Prediction.
type curveStopper struct {
	max       int64
	threshold float64
	minSteps  int
	minTrials int
	sign      float64 // to show forecasts in the objective's own direction
	st        curveState
}

type curveState struct {
	Live map[int64]*liveCurve `json:"live"`
	// Best is the best final value of the completed trials (minimising form).
	Best      float64 `json:"best"`
	Completed int     `json:"completed"`
	// Preds holds the latest forecast of each trial, in the objective's direction.
	Preds map[int64]*virga.Prediction `json:"preds"`
}

func newCurveStopper(maxR int64, threshold float64, minSteps, minTrials int64, sign float64) (*curveStopper, error) {
	if maxR < 1 {
		return nil, fmt.Errorf("curve needs max_resource, the step at which a trial ends")
	}
	if !(threshold > 0 && threshold <= 1) {
		return nil, fmt.Errorf("threshold must be in (0, 1], got %g", threshold)
	}
	return &curveStopper{max: maxR, threshold: threshold, minSteps: int(max(minSteps, 3)), minTrials: int(max(minTrials, 1)), sign: sign,
		st: curveState{Live: map[int64]*liveCurve{}, Preds: map[int64]*virga.Prediction{}}}, nil
}

func (c *curveStopper) report(r *record, step int64, v float64) Decision {
	lc := c.st.Live[r.Trial]
	if lc == nil {
		lc = &liveCurve{}
		c.st.Live[r.Trial] = lc
	}
	lc.add(step, v)
	// The curve families are functions of steps from 1: a step 0 (a value
	// before training) is left out of the fit.
	first, _ := slices.BinarySearch(lc.Steps, 1)
	if len(lc.Steps)-first < c.minSteps || step >= c.max {
		return Continue
	}
	xs := make([]float64, 0, len(lc.Steps)-first)
	for _, s := range lc.Steps[first:] {
		xs = append(xs, float64(s))
	}
	f, err := curve.Predict(xs, lc.Values[first:], float64(c.max))
	if err != nil || math.IsNaN(f.Mean) || math.IsInf(f.Mean, 0) || math.IsNaN(f.Std) || math.IsInf(f.Std, 0) {
		return Continue
	}
	p := &virga.Prediction{Step: step, Horizon: c.max, Mean: c.sign * f.Mean, Std: f.Std, ProbBetter: 1}
	if c.st.Completed > 0 {
		p.ProbBetter = f.ProbBelow(c.st.Best)
	}
	c.st.Preds[r.Trial] = p
	if c.st.Completed >= c.minTrials && p.ProbBetter < c.threshold {
		return Stop
	}
	return Continue
}

func (c *curveStopper) ended(r *record) {
	delete(c.st.Live, r.Trial)
	delete(c.st.Preds, r.Trial) // the trial keeps its last forecast
	if !r.Complete || !r.Reported {
		return
	}
	if c.st.Completed == 0 || r.Value < c.st.Best {
		c.st.Best = r.Value
	}
	c.st.Completed++
}

// Prediction returns the latest forecast for a trial, or nil.
func (c *curveStopper) Prediction(trialID int64) *virga.Prediction {
	p := c.st.Preds[trialID]
	if p == nil {
		return nil
	}
	cp := *p
	return &cp
}

func (c *curveStopper) promote() *record { return nil }

func (c *curveStopper) save() (json.RawMessage, error) { return json.Marshal(c.st) }

func (c *curveStopper) load(b json.RawMessage, _ map[int64]*record) error {
	var st curveState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	if math.IsNaN(st.Best) || st.Completed < 0 {
		return fmt.Errorf("curve: malformed best value")
	}
	if st.Live == nil {
		st.Live = map[int64]*liveCurve{}
	}
	if st.Preds == nil {
		st.Preds = map[int64]*virga.Prediction{}
	}
	for id, lc := range st.Live {
		if lc == nil || len(lc.Steps) != len(lc.Values) {
			return fmt.Errorf("curve: curve of trial %d is malformed", id)
		}
	}
	c.st = st
	return nil
}
