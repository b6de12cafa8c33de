package forecast

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Kept is the plan of an estimate kept with an experiment (virga estimate
// --json, its experiment.estimate event) that the run is compared with:
// Virga's own plan when it has one, else on-demand, else the first.
type Kept struct {
	Plan    string        `json:"plan"`
	Wall    time.Duration `json:"wall"` // mean
	WallP10 time.Duration `json:"wall_p10"`
	WallP50 time.Duration `json:"wall_p50"` // the mean in estimates made before it was kept
	WallP90 time.Duration `json:"wall_p90"`
	Cost    float64       `json:"cost"` // mean
	CostP10 float64       `json:"cost_p10"`
	CostP50 float64       `json:"cost_p50"`
	CostP90 float64       `json:"cost_p90"`
	// Shift is the factor the estimate's calibration had multiplied the
	// model's times by (its median actual/predicted); 1 when none.
	Shift float64 `json:"shift"`
}

// KeptPlan reads the plan a run is compared with from a kept estimate; ok
// is false when it has none.
func KeptPlan(estimate string) (k Kept, ok bool) {
	var rep struct {
		Plans       []Kept `json:"plans"`
		Calibration *struct {
			Median float64 `json:"median"`
		} `json:"calibration"`
	}
	if json.Unmarshal([]byte(estimate), &rep) != nil || len(rep.Plans) == 0 {
		return Kept{}, false
	}
	k = rep.Plans[0]
	for _, want := range []string{"on-demand", "virga"} {
		for _, p := range rep.Plans {
			if p.Plan == want {
				k = p
			}
		}
	}
	if k.WallP50 <= 0 {
		k.WallP50 = k.Wall
	}
	if k.CostP50 <= 0 {
		k.CostP50 = k.Cost
	}
	k.Shift = 1
	if c := rep.Calibration; c != nil && c.Median > 0 && !math.IsInf(c.Median, 0) {
		k.Shift = c.Median
	}
	return k, true
}

// Pair is one completed experiment's estimate made before its run beside
// what the run took: what calibrates later estimates.
type Pair struct {
	ExperimentID int64     `json:"experiment_id"`
	Name         string    `json:"name"`
	Entrypoint   []string  `json:"entrypoint"`
	EndedAt      time.Time `json:"ended_at"`
	// Predicted is the kept estimate's plan.
	Predicted Kept `json:"predicted"`
	// Wall is the run's wall time (submission to end), Cost what all its
	// attempts cost.
	Wall time.Duration `json:"wall"`
	Cost float64       `json:"cost"`
}

// Ratio is the pair's actual wall time over the model's median (the
// estimate's median without the calibration it had); ok is false when
// either is not positive.
func (p Pair) Ratio() (r float64, ok bool) {
	pred := float64(p.Predicted.WallP50) / p.Predicted.Shift
	if p.Wall <= 0 || !(pred > 0) || math.IsInf(pred, 0) {
		return 0, false
	}
	r = float64(p.Wall) / pred
	return r, r > 0 && !math.IsInf(r, 0)
}

// MinPairs is the fewest pairs a calibration is made from. With n pairs the
// spread of the log ratios is estimated with n-1 degrees of freedom; the
// interval for the next run is then a Student's t with n-1 degrees, whose
// tails with one degree (two pairs) are a Cauchy's, so wide that the
// interval says nothing (p90 over p10 about 50 for a spread of 0.3). From
// three pairs its width is finite and shrinks quickly with more runs.
const MinPairs = 3

// Calibration is what earlier runs say of an estimate's error: the log of
// actual over predicted wall time, taken to be normal with an unknown mean
// (the bias) and spread. The next run's log ratio then follows a Student's
// t with N-1 degrees of freedom, centred at the mean of the N log ratios
// seen, scaled by their standard deviation times sqrt(1+1/N): the
// prediction interval that holds its coverage for any N (with few pairs,
// their own p10 and p90 would be their extremes, which cover the next run
// only (N-1)/(N+1) of the time).
type Calibration struct {
	// Pairs is how many runs it was made from.
	Pairs int `json:"pairs"`
	// Mu and Sigma are the mean and standard deviation of the log ratios.
	Mu    float64 `json:"mu"`
	Sigma float64 `json:"sigma"`
	// Median, P10 and P90 are of the next run's actual over predicted wall
	// time.
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
}

// Calibrate makes a calibration from pairs (those without a usable ratio
// left out); ok is false with fewer than MinPairs usable.
func Calibrate(pairs []Pair) (c Calibration, ok bool) {
	var logs []float64
	for _, p := range pairs {
		if r, ok := p.Ratio(); ok {
			logs = append(logs, math.Log(r))
		}
	}
	n := len(logs)
	if n < MinPairs {
		return Calibration{}, false
	}
	mu := 0.0
	for _, l := range logs {
		mu += l
	}
	mu /= float64(n)
	ss := 0.0
	for _, l := range logs {
		ss += (l - mu) * (l - mu)
	}
	c = Calibration{Pairs: n, Mu: mu, Sigma: math.Sqrt(ss / float64(n-1)), Median: math.Exp(mu)}
	c.P10, c.P90 = math.Exp(c.logQuantile(0.1)), math.Exp(c.logQuantile(0.9))
	return c, true
}

// next is the distribution of the next run's log ratio.
func (c Calibration) next(src rand.Source) distuv.StudentsT {
	return distuv.StudentsT{Mu: c.Mu, Sigma: c.Sigma * math.Sqrt(1+1/float64(c.Pairs)), Nu: float64(c.Pairs - 1), Src: src}
}

func (c Calibration) logQuantile(p float64) float64 {
	if c.Sigma == 0 {
		return c.Mu
	}
	return c.next(nil).Quantile(p)
}

// Interval is the calibrated 10th, 50th and 90th percentiles of a run the
// model predicts to take p50.
func (c Calibration) Interval(p50 time.Duration) (lo, mid, hi time.Duration) {
	f := float64(p50)
	return time.Duration(f * c.P10), time.Duration(f * c.Median), time.Duration(f * c.P90)
}

// Factor draws, from r, how many times as long as the model says a run
// takes.
func (c Calibration) Factor(r *rand.Rand) float64 {
	if c.Sigma == 0 {
		return c.Median
	}
	return math.Exp(c.next(r).Rand())
}
