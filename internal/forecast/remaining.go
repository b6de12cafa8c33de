package forecast

import (
	"math"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Input is what a forecast during a run knows.
type Input struct {
	// Started is when the experiment was submitted, Now the time of the
	// forecast.
	Started, Now time.Time
	// Done is the steps its trials have run, Total the steps all of them
	// are expected to run (ExpectedSteps).
	Done, Total float64
	// Spent is what it has cost so far, in dollars.
	Spent float64
	// Deadline (zero: none) and Budget (0: none) are the experiment's.
	Deadline time.Time
	Budget   float64
	// Before, if not nil, is the forecast made before the run.
	Before *Before
	// Unmodelled is the spread of a whole run's forecast (DefaultUnmodelled
	// when 0).
	Unmodelled float64
}

// Before is the forecast of the whole run made before it: its mean wall
// time and cost.
type Before struct {
	Wall time.Duration
	Cost float64
}

// Forecast is what is left of a run: the share done, the wall time and
// the money to the end (median, 10th and 90th percentiles), when it should
// end, and the chances of meeting the deadline and the budget (nil when
// the experiment has none).
type Forecast struct {
	Done       float64       `json:"done"` // share of the expected steps run
	Left       time.Duration `json:"left"`
	LeftP10    time.Duration `json:"left_p10"`
	LeftP90    time.Duration `json:"left_p90"`
	More       float64       `json:"more"`
	MoreP10    float64       `json:"more_p10"`
	MoreP90    float64       `json:"more_p90"`
	End        time.Time     `json:"end"`
	PDeadline  *float64      `json:"p_deadline,omitempty"`
	PBudget    *float64      `json:"p_budget,omitempty"`
	FromBefore float64       `json:"from_before"` // the weight of the forecast made before the run
}

// Remaining forecasts the rest of a run; ok is false when nothing can be
// said yet (no step run and no forecast from before the run).
func Remaining(in Input) (f Forecast, ok bool) {
	if in.Total <= 0 {
		return Forecast{}, false
	}
	done := min(max(in.Done/in.Total, 0), 1)
	elapsed := max(in.Now.Sub(in.Started), 0)
	left := 1 - done
	// The run's own rate, and the forecast before it, each of what is
	// left; blended by the share done.
	var lnT, lnC float64
	w := done
	switch {
	case in.Before != nil && in.Before.Wall > 0:
		if done == 0 {
			w = 0
		}
	case done > 0:
		w = 1
	default:
		return Forecast{}, false
	}
	if w > 0 {
		lnT += w * math.Log(max(elapsed.Seconds()*left/done, 1e-3))
		lnC += w * math.Log(max(in.Spent*left/done, 1e-9))
	}
	if w < 1 {
		lnT += (1 - w) * math.Log(max(in.Before.Wall.Seconds()*left, 1e-3))
		lnC += (1 - w) * math.Log(max(in.Before.Cost*left, 1e-9))
	}
	u := in.Unmodelled
	if u <= 0 {
		u = DefaultUnmodelled
	}
	sd := u * math.Sqrt(left)
	z := 1.2815515655446004 // the normal's 90th percentile
	secs := func(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
	if done >= 1 {
		lnT, lnC = math.Inf(-1), math.Inf(-1)
	}
	f = Forecast{Done: done, FromBefore: 1 - w,
		Left: secs(math.Exp(lnT)), LeftP10: secs(math.Exp(lnT - z*sd)), LeftP90: secs(math.Exp(lnT + z*sd)),
		More: math.Exp(lnC), MoreP10: math.Exp(lnC - z*sd), MoreP90: math.Exp(lnC + z*sd)}
	f.End = in.Now.Add(f.Left)
	std := distuv.UnitNormal
	if !in.Deadline.IsZero() {
		p := chance(std, in.Deadline.Sub(in.Now).Seconds(), lnT, sd)
		f.PDeadline = &p
	}
	if in.Budget > 0 {
		p := chance(std, in.Budget-in.Spent, lnC, sd)
		f.PBudget = &p
	}
	return f, true
}

// chance is P(exp(N(ln, sd)) <= room).
func chance(std distuv.Normal, room, ln, sd float64) float64 {
	switch {
	case math.IsInf(ln, -1):
		if room >= 0 {
			return 1
		}
		return 0
	case room <= 0:
		return 0
	case sd == 0:
		if math.Log(room) >= ln {
			return 1
		}
		return 0
	}
	return std.CDF((math.Log(room) - ln) / sd)
}
